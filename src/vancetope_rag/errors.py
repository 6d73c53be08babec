"""Errors raised by vancetope-rag.

Every error derives from :class:`RagError` and carries the context a user needs to act on it
(tenant, project, RAG name, document id, or the extra to install). Messages are written for the
person reading them, never include secrets, and say what to do next.
"""

from __future__ import annotations

from typing import Any


class RagError(Exception):
    """Base class of every error this package raises on purpose."""

    #: Short machine-readable code, stable across releases (used by CLI, REST and tools).
    code: str = "RAG_ERROR"

    def __init__(
        self,
        message: str,
        *,
        tenant_id: str | None = None,
        project_id: str | None = None,
        rag_name: str | None = None,
        rag_id: str | None = None,
        document_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.tenant_id = tenant_id
        self.project_id = project_id
        self.rag_name = rag_name
        self.rag_id = rag_id
        self.document_id = document_id

    def __str__(self) -> str:
        return self.message


class InvalidInputError(RagError, ValueError):
    """A caller passed a value that cannot be used (empty text, bad number, bad key...)."""

    code = "INVALID_INPUT"


class ToolArgumentError(InvalidInputError):
    """A tool call's argument is missing, unknown or of the wrong type (``.parameter`` names
    it), so the model can correct the call and retry."""

    code = "INVALID_ARGUMENT"

    def __init__(self, message: str, *, parameter: str) -> None:
        super().__init__(message)
        self.parameter = parameter


class TextTooLongError(InvalidInputError):
    """A text is longer than the engine's limit (``VANCETOPE_RAG_MAX_TEXT_CHARS``)."""

    code = "TEXT_TOO_LONG"


class RagNotFoundError(RagError, LookupError):
    """No RAG with that id or name exists in the caller's tenant and project."""

    code = "RAG_NOT_FOUND"


class RagAlreadyExistsError(RagError):
    """A RAG with that name already exists in the project."""

    code = "RAG_ALREADY_EXISTS"


class ReservedNameError(RagError):
    """Names starting with ``_`` belong to the system (``_documents``); users may not use them."""

    code = "RESERVED_NAME"


class DocumentNotFoundError(RagError, LookupError):
    """No document with that id or path exists in the project."""

    code = "DOCUMENT_NOT_FOUND"


class ProjectNotFoundError(RagError, LookupError):
    """The project does not exist in the tenant."""

    code = "PROJECT_NOT_FOUND"


class ProjectClosedError(RagError):
    """The project is closed (its RAG disposed); bring it up again before working on it."""

    code = "PROJECT_CLOSED"


class EngineClosedError(RagError):
    """The app was closed: open a new one for further work."""

    code = "ENGINE_CLOSED"


class ProjectRagDisabledError(RagError):
    """The project's ``_documents`` RAG is turned off (``rag.project.enabled`` is false), so
    an explicit query of it is refused rather than answered from a disabled index."""

    code = "PROJECT_RAG_DISABLED"


class RebuildRunningError(RagError):
    """A rebuild of that RAG is already running (or switching over); wait or cancel it."""

    code = "REBUILD_RUNNING"


class NoRebuildError(RagError, LookupError):
    """There is no running rebuild to cancel."""

    code = "NO_REBUILD_RUNNING"


class CopyConflictError(RagError):
    """A store-to-store copy found the target holding something else under a record's id or
    name; the copy stops there and overwrites nothing."""

    code = "COPY_CONFLICT"


class StoreError(RagError):
    """The store cannot be opened or used (bad URI, unwritable path, corrupt file...)."""

    code = "STORE_ERROR"


class StoreCorruptError(StoreError):
    """The store's data is damaged; it must be restored from a backup."""

    code = "STORE_CORRUPT"


class StoreFullError(StoreError):
    """The store has no room left (disk full, or a size limit reached)."""

    code = "STORE_FULL"


class EmbeddingError(RagError):
    """The embedding provider failed or is misconfigured."""

    code = "EMBEDDING_ERROR"


class EmbeddingConfigError(EmbeddingError):
    """The ``ai.embedding.*`` settings are incomplete or invalid (e.g. ``openai`` without key)."""

    code = "EMBEDDING_CONFIG"


class EmbeddingDisabledError(EmbeddingError):
    """The tenant switched ``ai.embedding.provider`` to ``none``: no embed or query call allowed."""

    code = "EMBEDDING_DISABLED"


class DimensionMismatchError(EmbeddingError):
    """The configured model produces vectors of another size than the RAG was pinned with."""

    code = "DIMENSION_MISMATCH"


class ProviderUnavailableError(EmbeddingError):
    """The embedding provider is down (connection, timeout, 5xx, 429) or refuses the settings
    (401/403/404): its circuit is open, so no call is made until it is due to be tried again.

    Not the document's fault: the indexer gives such documents back without spending an
    attempt. ``config`` tells a configuration error (fix the settings) from an outage.
    """

    code = "PROVIDER_UNAVAILABLE"

    def __init__(self, message: str, *, retry_in_s: float, config: bool = False) -> None:
        super().__init__(message)
        self.retry_in_s = retry_in_s
        self.config = config


class DimensionPausedError(ProviderUnavailableError, DimensionMismatchError):
    """The provider's circuit for the RAG's model is open because it answers vectors of
    another dimension: the indexer gives documents back as in an outage, a query reports the
    mismatch (no wait cures it; the rebuild does)."""

    code = "DIMENSION_MISMATCH"


class RerankError(RagError):
    """The reranker failed or is misconfigured (``ai.rerank.*``). A query never fails for it:
    the rerank stage is skipped and the retrieval's order kept."""

    code = "RERANK_ERROR"

    def __init__(self, message: str, *, status_code: int | None = None, headers: Any = None):
        super().__init__(message)
        #: The HTTP status the reranker answered with, for the circuits' classifier.
        self.status_code = status_code
        #: What the classifier reads ``Retry-After`` from (``response.headers``).
        self.response = None if status_code is None else _Answer(status_code, headers or {})


class _Answer:
    """The part of an HTTP answer a failure's classifier reads."""

    def __init__(self, status_code: int, headers: Any) -> None:
        self.status_code = status_code
        self.headers = headers


class MissingDependencyError(RagError, ImportError):
    """An optional dependency is not installed; the message names the extra to install."""

    code = "DEPENDENCY_MISSING"

    def __init__(self, what: str, extra: str, *, missing: str = "", first: str = "") -> None:
        """``missing``: the package that is not there, when it is not the extra itself but
        something to install before it (``first``, the install line), as torch's CPU build
        before the ``embedded`` extra."""
        line = f"pip install 'vancetope-rag[{extra}]'"
        if missing and first:
            message = f"{what}: {missing} is not installed: {first}, then {line}"
        else:
            message = f"{what} needs an optional dependency that is not installed: {line}"
        super().__init__(message)
        self.extra = extra


class OnnxExportRefusedError(EmbeddingError):
    """The embedded model's ONNX export cannot be loaded or does not reproduce torch's
    vectors; torch keeps serving (the export is never used)."""

    code = "EMBEDDED_EXPORT_REFUSED"


class ExtractionError(RagError):
    """Text could not be extracted from a file (binary, not UTF-8, too large...)."""

    code = "EXTRACTION_FAILED"


class ExtractorDependencyMissingError(ExtractionError, MissingDependencyError):
    """An extractor needs an optional dependency; ``extra`` names what to install."""

    code = "EXTRACT_DEPENDENCY_MISSING"

    def __init__(self, what: str, extra: str) -> None:
        super().__init__(what, extra)


class ExtractorProgramMissingError(ExtractorDependencyMissingError):
    """An extractor runs a program (``soffice``, ``ffmpeg``) that is not installed or not on
    the ``PATH``; ``package`` (also ``extra``) names the Debian/Ubuntu package to install.

    A failure of the machine, not of the file: the next import tries the file again.
    """

    code = "EXTRACT_PROGRAM_MISSING"

    def __init__(self, what: str, program: str, package: str) -> None:
        RagError.__init__(
            self,
            f"{what} needs the {program} program, which is not installed (or not on the "
            f"PATH): install Debian/Ubuntu's {package} package (apt-get install {package})",
        )
        self.extra = package

    @property
    def package(self) -> str:
        """The Debian/Ubuntu package that provides the program."""
        return self.extra


class NoTextLayerError(ExtractionError):
    """A scan: a PDF without a text layer, or an image, and no OCR/vision backend configured
    (or it read nothing)."""

    code = "EXTRACT_NO_TEXT_LAYER"


class NoTextError(ExtractionError):
    """The file was read and holds no text (an empty file, a document of images only)."""

    code = "EXTRACT_NO_TEXT"


class ExtractionTimeoutError(ExtractionError):
    """The extraction ran past its wall-time budget and was stopped."""

    code = "EXTRACT_TIMEOUT"


class ExtractorUnavailableError(ExtractionError):
    """What reads the file is not there now: the ``tesseract`` program is missing, the
    vision model is unreachable, overloaded, paused or refuses the settings. The machine's
    failure, not the file's: the file is read again, with back-off, without a new import."""

    code = "EXTRACT_BACKEND_UNAVAILABLE"


class UnsupportedTypeError(ExtractionError):
    """No extractor handles the file's MIME type (images, archives, unknown binaries...)."""

    code = "EXTRACT_UNSUPPORTED_TYPE"

    def __init__(self, message: str, *, mime_type: str) -> None:
        super().__init__(message)
        self.mime_type = mime_type


class FileTooLargeError(ExtractionError):
    """A file is larger than the size budget of its read; it was not read past the budget."""

    code = "EXTRACT_TOO_LARGE"


class FileChangedWhileReadError(ExtractionError):
    """A file changed (size or mtime) while it was read, also when read a second time: its
    bytes could mix two versions, so none are kept."""

    code = "EXTRACT_CHANGED_WHILE_READ"


class PathNotAllowedError(RagError, PermissionError):
    """A workspace path was refused (traversal, absolute, dotfile, symlink out of the root...)."""

    code = "PATH_NOT_ALLOWED"


class BridgeError(RagError):
    """``files_visualize`` could not read the file (the spec's MM-Bridge codes); ``cause``
    is the extraction's own code (``EXTRACT_NO_TEXT_LAYER``…) when one led to it, so the
    model and the operator see both what went wrong and where."""

    code = "MM_BRIDGE_UNREADABLE"

    def __init__(self, message: str, *, cause: str | None = None) -> None:
        super().__init__(message)
        self.cause = cause


class BridgeDependencyMissingError(BridgeError):
    """A program or Python extra the file's type needs is missing; the message names what
    to install."""

    code = "MM_BRIDGE_DEPENDENCY_MISSING"


class BridgeVisionNotConfiguredError(BridgeError):
    """The file (a scan, an image, ``vision: true``) needs a vision model and none is
    configured: a named error instead of an empty result."""

    code = "MM_BRIDGE_VISION_NOT_CONFIGURED"


class BridgeVisionUnavailableError(BridgeError):
    """The vision model is configured but down or refusing (its circuit is open)."""

    code = "MM_BRIDGE_VISION_UNAVAILABLE"


class BridgeUnsupportedTypeError(BridgeError):
    """No extractor reads the file's type."""

    code = "MM_BRIDGE_UNSUPPORTED_TYPE"


class BridgeLimitError(BridgeError):
    """The file is larger than the tool reads, or reading it passed the time limit."""

    code = "MM_BRIDGE_LIMIT"


class RecipeError(RagError):
    """A recipe file is invalid; the message names the file and the key."""

    code = "RECIPE_INVALID"


class SettingError(InvalidInputError):
    """A cascade setting key is unknown or its value is invalid."""

    code = "SETTING_INVALID"


class ApiConfigError(RagError):
    """The REST API cannot start as configured (no or too short JWT secret)."""

    code = "API_CONFIG"
