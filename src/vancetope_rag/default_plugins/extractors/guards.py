"""What the office and book extractors share: zip-bomb and DTD guards, the limits behind
them, and the wording of budget cuts.

Every format they read is a zip: :func:`check_zip` refuses zip bombs and encrypted (OLE)
files before any library sees the bytes.
"""

from __future__ import annotations

import io
import zipfile

from vancetope_rag.errors import FileTooLargeError, RagError
from vancetope_rag.extraction.registry import extraction_error

#: Total unpacked size of a zip's members at most (zip-bomb guard).
MAX_UNPACKED_BYTES = 200 * 1024 * 1024
#: A member bigger than :data:`RATIO_MIN_BYTES` may unpack to this many times its packed size.
MAX_RATIO = 200
RATIO_MIN_BYTES = 10 * 1024 * 1024
MAX_MEMBERS = 20_000
#: Largest XML part (``content.xml``) read, after decompression.
MAX_XML_BYTES = 50 * 1024 * 1024
#: Cells visited in a workbook, empty ones included (a sparse or hostile sheet's grid).
MAX_GRID = 20_000_000
#: Columns of a spreadsheet row kept (the widest sheets Excel and LibreOffice make).
MAX_COLUMNS = 16_384
OLE_MAGIC = b"\xd0\xcf\x11\xe0"
ENCRYPTED = "the file is encrypted (password-protected); save it without a password"


# --- zip helpers --------------------------------------------------


def check_zip(data: bytes, path: str, kind: str = "zip", *, scan_xml: bool = False) -> None:
    """Refuse what no extractor should unpack: encrypted OOXML, broken zips, zip bombs.

    Args:
        data: The file content.
        path: The file's path, for messages.
        kind: The format's name for messages (``"XLSX"``).
        scan_xml: Also refuse a DTD or entity declaration at the start of any XML part (the
            parts a library, not this module, parses).

    Raises:
        ExtractionError: The file is encrypted, not a zip, or unpacks to too much.
    """
    if data.startswith(OLE_MAGIC):
        # Password-protected OOXML (and ODF exported that way) is an OLE compound file.
        raise extraction_error(path, ENCRYPTED)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            infos = archive.infolist()
            if len(infos) > MAX_MEMBERS:
                raise extraction_error(path, f"the {kind} has over {MAX_MEMBERS} parts")
            total = 0
            for info in infos:
                total += info.file_size
                ratio = info.file_size / max(1, info.compress_size)
                if total > MAX_UNPACKED_BYTES or (
                    info.file_size > RATIO_MIN_BYTES and ratio > MAX_RATIO
                ):
                    raise extraction_error(
                        path,
                        f"looks like a zip bomb ({info.filename!r} unpacks to "
                        f"{info.file_size:,} bytes; at most {MAX_UNPACKED_BYTES:,} in all and "
                        f"{MAX_RATIO}x its packed size are read)",
                    )
            if scan_xml:
                for info in infos:
                    if info.filename.endswith((".xml", ".rels")):
                        with archive.open(info) as member:
                            refuse_dtd(member.read(65_536), path, info.filename)
    except RagError:
        raise
    except (
        zipfile.BadZipFile,
        zipfile.LargeZipFile,
        NotImplementedError,
        OSError,
        EOFError,
        ValueError,
    ) as exc:
        raise extraction_error(path, f"not a readable {kind} file ({exc})") from None


def read_member(
    archive: zipfile.ZipFile, name: str, path: str, limit: int = MAX_XML_BYTES
) -> bytes:
    """A zip member's bytes, at most ``limit`` of them (the header's size is not trusted).

    Raises:
        ExtractionError: The member is missing or bigger than ``limit`` unpacked.
    """
    try:
        info = archive.getinfo(name)
    except KeyError:
        raise extraction_error(path, f"the file has no {name}") from None
    if info.file_size > limit:
        raise extraction_error(path, f"{name} is larger than {limit} bytes unpacked")
    with archive.open(info) as member:
        data = member.read(limit + 1)
    if len(data) > limit:
        raise extraction_error(path, f"{name} is larger than {limit} bytes unpacked")
    return data


def refuse_dtd(xml: bytes, path: str, name: str, *, html: bool = False) -> None:
    """Refuse XML with a DTD or entity declaration (entity bombs, external entities).

    Args:
        xml: The XML, or its start.
        path: The file's path, for messages.
        name: The part's name, for messages.
        html: XHTML: a document type declaration is allowed, an entity declaration is not.
    """
    upper = xml.upper()
    if b"<!ENTITY" in upper or (not html and b"<!DOCTYPE" in upper):
        raise extraction_error(path, f"{name} contains a DTD or entity declaration, refused")


def cut_reason(read: int, total: int, unit: str, key: str) -> str:
    return f"only the first {read} of {total} {unit} were read (rag.extract.{key})"


def grid_cut_reason(read: int, total: int) -> str:
    return f"only {read} of {total} sheets were read: they span over {MAX_GRID:,} cells"


def cells_cut_reason(limit: int) -> str:
    return f"only the first {limit:,} non-empty cells were read (rag.extract.maxCells)"


def check_size(data: bytes, path: str, limit: int, key: str, kind: str) -> None:
    """Refuse a file over its type's size budget (``rag.extract.<key>``) before a program
    spends its time on it.

    Raises:
        FileTooLargeError: ``data`` is longer than ``limit`` bytes.
    """
    if len(data) > limit:
        raise FileTooLargeError(
            extraction_error(
                path,
                f"the {kind} is {len(data):,} bytes, over the {limit:,} bytes read for its "
                f"type (rag.extract.{key}): raise the limit or split the file",
            ).message
        )
