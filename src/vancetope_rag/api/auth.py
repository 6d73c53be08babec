"""JWT bearer auth for the REST surface: HS256 with the engine's ``jwt_secret``.

A token carries ``sub``, ``tenant``, ``projects`` (a list of project ids or ``"*"``), ``perm``
(a list; ``"WRITE"`` is what every project RAG call needs, spec §7) and ``exp``. A request is
let through only for the token's tenant and one of its projects; everything else is 401
(no/invalid/expired token) or 403 (valid token, wrong tenant/project/permission).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import jwt

# Re-exported: it was defined here before it joined the other errors in vancetope_rag.errors.
from vancetope_rag.errors import ApiConfigError as ApiConfigError

ALGORITHM = "HS256"
WRITE = "WRITE"
ALL_PROJECTS = "*"
#: RFC 7518 §3.2: an HS256 key must be at least as long as the hash output (256 bits).
MIN_SECRET_BYTES = 32
#: A random secret of 32 bytes has many different characters (hex: up to 16, and at least 8
#: with overwhelming probability); a repeated character or two is a placeholder, not a key.
MIN_SECRET_DISTINCT = 8
#: Tolerated clock skew between the token issuer and this process.
LEEWAY_S = 30
MAX_TOKEN_CHARS = 8192


class AuthError(Exception):
    """A request failed authentication (401) or authorisation (403)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Principal:
    """Who called, as the verified token says."""

    subject: str
    tenant: str
    projects: tuple[str, ...] | None  # None = every project of the tenant ("*")
    perms: frozenset[str]

    def may_write(self, tenant: str, project: str) -> None:
        """Raise a 403 :class:`AuthError` unless this principal has WRITE on the project."""
        if tenant != self.tenant:
            raise AuthError(403, "FORBIDDEN", f"the token is not valid for tenant {tenant!r}")
        if self.projects is not None and project not in self.projects:
            raise AuthError(
                403, "FORBIDDEN", f"the token does not grant access to project {project!r}"
            )
        if WRITE not in self.perms:
            raise AuthError(
                403, "FORBIDDEN", f"the token lacks the {WRITE} permission on project {project!r}"
            )


def check_secret(secret: str | None) -> str:
    """The usable secret, or :class:`ApiConfigError` saying how to configure one."""
    if not secret:
        raise ApiConfigError(
            "the REST API needs a JWT secret and will not run unauthenticated; set "
            "VANCETOPE_RAG_JWT_SECRET to a random string of at least "
            f"{MIN_SECRET_BYTES} bytes (e.g. `openssl rand -hex 32`)"
        )
    # Blanks around the value (a quoting slip) add no strength: count what is left.
    core = secret.strip()
    if len(core.encode("utf-8", "surrogatepass")) < MIN_SECRET_BYTES:
        raise ApiConfigError(
            f"VANCETOPE_RAG_JWT_SECRET is shorter than {MIN_SECRET_BYTES} bytes (blanks not "
            "counted), too weak for HS256; use a random string, e.g. `openssl rand -hex 32`"
        )
    if len(set(core)) < MIN_SECRET_DISTINCT:
        # 32 spaces, or 'a' * 40: long enough, but anyone guesses it.
        raise ApiConfigError(
            f"VANCETOPE_RAG_JWT_SECRET has fewer than {MIN_SECRET_DISTINCT} different "
            "characters: it is not random; use e.g. `openssl rand -hex 32`"
        )
    return secret


def issue_token(
    secret: str,
    *,
    subject: str,
    tenant: str,
    projects: Sequence[str] | str,
    perms: Sequence[str] = (WRITE,),
    ttl_s: float = 3600.0,
    now: float | None = None,
) -> str:
    """Sign a token (for operators and tests; production tokens come from the host's IdP)."""
    issued = int(time.time() if now is None else now)
    claims: dict[str, object] = {
        "sub": subject,
        "tenant": tenant,
        "projects": projects if isinstance(projects, str) else list(projects),
        "perm": list(perms),
        "iat": issued,
        "exp": issued + int(ttl_s),
    }
    return jwt.encode(claims, check_secret(secret), algorithm=ALGORITHM)


def _str_list(value: object, claim: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise AuthError(401, "INVALID_TOKEN", f"invalid token: claim {claim!r} must be a list")


class TokenVerifier:
    """Verifies bearer tokens against one secret."""

    def __init__(self, secret: str) -> None:
        self._secret = check_secret(secret)

    def __repr__(self) -> str:  # never show the secret, not even in a debugger dump
        return "TokenVerifier(secret=***)"

    def principal(self, authorization: str | None) -> Principal:
        """The principal of an ``Authorization`` header value, or a 401 :class:`AuthError`."""
        if not authorization or not authorization.strip():
            raise AuthError(
                401,
                "UNAUTHENTICATED",
                "missing bearer token; send the header 'Authorization: Bearer <jwt>'",
            )
        scheme, _, token = authorization.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise AuthError(
                401,
                "UNAUTHENTICATED",
                "the Authorization header must be 'Bearer <jwt>'",
            )
        if len(token) > MAX_TOKEN_CHARS:
            raise AuthError(401, "INVALID_TOKEN", "invalid token: too long")
        try:
            claims = jwt.decode(
                token,
                self._secret,
                algorithms=[ALGORITHM],
                leeway=LEEWAY_S,
                options={"require": ["exp", "sub", "tenant"]},
            )
        except jwt.ExpiredSignatureError:
            raise AuthError(
                401, "TOKEN_EXPIRED", "the token has expired; request a new one"
            ) from None
        except jwt.InvalidSignatureError:
            raise AuthError(
                401, "INVALID_TOKEN", "invalid token: signature verification failed"
            ) from None
        except jwt.InvalidTokenError as exc:
            # PyJWT messages name the failed check (claim, format), never the key.
            raise AuthError(401, "INVALID_TOKEN", f"invalid token: {exc}") from None
        tenant, subject = claims.get("tenant"), claims.get("sub")
        if not isinstance(tenant, str) or not tenant or not isinstance(subject, str):
            raise AuthError(401, "INVALID_TOKEN", "invalid token: 'sub' and 'tenant' must be text")
        raw_projects = claims.get("projects")
        projects = None if raw_projects == ALL_PROJECTS else _str_list(raw_projects, "projects")
        return Principal(
            subject=subject,
            tenant=tenant,
            projects=projects,
            perms=frozenset(_str_list(claims.get("perm"), "perm")),
        )
