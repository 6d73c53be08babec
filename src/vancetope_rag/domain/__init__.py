"""Pure domain: records and rules, no I/O."""
