"""``python -m vancetope_rag.cli``."""

from vancetope_rag.cli import main

main()
