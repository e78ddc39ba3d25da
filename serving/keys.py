"""API keys of the HTTP service: the key file, scopes, constant-time lookup, and who may bind
where. Standard library only (the hooks import `client_headers` without FastAPI).

Key file (`failfast serve --api-key-file FILE`), one key per line; blank lines and lines starting
with `#` are ignored (a key cannot start with `#`), and so is the rest of a line from a column
that starts with `#` (a trailing comment after whitespace):

    KEY                          a key with the `score` scope, named key-<first 8 hex of sha256(KEY)>
    KEY score,verdict            the scopes it has (score, verdict, admin)
    KEY verdict harness-eval     a name (the third column) for the decision log and the server log

A key's name is what the decision log records with each verdict (`key_name`) and what log lines
say; the key itself is never logged, echoed or used as a metric label. Unnamed keys are named by a
short sha256 prefix, which says which line of the file gave a verdict without revealing the key.
The file must be a regular file that neither group nor others may read or write (`chmod 600`):
otherwise it is refused (exit 2), as ssh refuses an open private key.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import os
import re
import socket
import stat
from dataclasses import dataclass
from pathlib import Path

from monitor.errors import FailfastError

log = logging.getLogger(__name__)

SCOPES = ("score", "verdict", "admin")
"""What a key may do: `score` sessions, steps and /v1/score; `verdict` the verdict routes;
`admin` /v1/status and /metrics."""
DEFAULT_SCOPES = frozenset({"score"})
MIN_KEY_CHARS = 16
"""Shorter keys are refused: a key is a bearer secret (`python -c "import secrets;
print(secrets.token_urlsafe(32))"` makes a good one)."""
MAX_KEY_CHARS = 512
MAX_FILE_BYTES = 1 << 20
ENV = "FAILFAST_API_KEY"
"""The environment variable the hooks (and any client of this package) take their key from."""
_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
_KEY = re.compile(r"[\x21-\x7e]+")  # printable ASCII without spaces: what a header carries


class KeyFileError(FailfastError):
    """The API key file is missing, open to others, or has a malformed line (never the key)."""


@dataclass(frozen=True)
class ApiKey:
    """One key of the file: its name, scopes and the sha256 of the key (the key is not kept)."""

    name: str
    scopes: frozenset[str]
    digest: bytes


def check_private(path: str | Path, what: str) -> os.stat_result:
    """The stat of `path` (opened, so a FIFO cannot hang the caller), or KeyFileError when it is
    not a regular file or group or others have any permission on it."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise KeyFileError(f"{p}: cannot open the {what}: {e.strerror or e}") from e
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    if not stat.S_ISREG(st.st_mode):
        raise KeyFileError(f"{p}: the {what} is not a regular file")
    if st.st_mode & 0o077:
        raise KeyFileError(
            f"{p}: the {what} is open to group or others (mode {stat.S_IMODE(st.st_mode):04o}); "
            f"run `chmod 600 {p}`"
        )
    return st


def read_private(path: str | Path, what: str, max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of a file only its owner may read (see `check_private`)."""
    st = check_private(path, what)
    if st.st_size > max_bytes:
        raise KeyFileError(f"{path}: the {what} is {st.st_size} bytes, over {max_bytes}")
    try:
        return Path(path).read_bytes()[:max_bytes]
    except OSError as e:
        raise KeyFileError(f"{path}: cannot read the {what}: {e.strerror or e}") from e


def parse_keys(text: str, path: str | Path = "<keys>") -> tuple[ApiKey, ...]:
    """The keys of a key file's text; KeyFileError names the line (never its key)."""
    keys: list[ApiKey] = []
    seen: set[bytes] = set()
    for n, line in enumerate(text.splitlines(), 1):
        cols = line.split()
        # a comment runs from a column starting with "#" to the line's end: no key, scope or
        # name starts with "#", so a trailing comment is never read as one
        cols = cols[: next((i for i, c in enumerate(cols) if c.startswith("#")), len(cols))]
        if not cols:
            continue
        where = f"{path}, line {n}"
        if len(cols) > 3:
            raise KeyFileError(f"{where}: {len(cols)} columns; expected KEY [SCOPES [NAME]]")
        key = cols[0]
        if not (MIN_KEY_CHARS <= len(key) <= MAX_KEY_CHARS) or not _KEY.fullmatch(key):
            raise KeyFileError(
                f"{where}: a key must be {MIN_KEY_CHARS} to {MAX_KEY_CHARS} printable ASCII "
                f"characters without spaces (this one has {len(key)})"
            )
        scopes = DEFAULT_SCOPES
        if len(cols) >= 2:
            scopes = frozenset(s for s in cols[1].split(",") if s)
            unknown = sorted(scopes - set(SCOPES))
            if unknown or not scopes:
                raise KeyFileError(
                    f"{where}: unknown scope {', '.join(unknown) or '(none)'}; scopes are a "
                    f"comma-separated list of {', '.join(SCOPES)}"
                )
        digest = hashlib.sha256(key.encode()).digest()
        name = cols[2] if len(cols) == 3 else f"key-{digest.hex()[:8]}"
        if not _NAME.fullmatch(name):
            raise KeyFileError(f"{where}: a name is 1 to 64 of A-Z a-z 0-9 . _ -")
        if name == key:
            raise KeyFileError(f"{where}: the name must not be the key (names are logged)")
        if digest in seen:
            raise KeyFileError(f"{where}: the same key is listed twice")
        seen.add(digest)
        keys.append(ApiKey(name, scopes, digest))
    if not keys:
        raise KeyFileError(f"{path}: no keys in the API key file")
    return tuple(keys)


class KeyRing:
    """The keys of a key file, reloadable (SIGHUP) without a restart.

    Args:
        path: the key file; read now (KeyFileError when it cannot be used).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.keys = self._read()
        self.reloads = 0

    def _read(self) -> tuple[ApiKey, ...]:
        raw = read_private(self.path, "API key file")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise KeyFileError(f"{self.path}: not UTF-8 text (byte {e.start})") from e
        return parse_keys(text, self.path)

    def reload(self) -> bool:
        """Read the file again; on any problem keep the keys in use and log why (a typo in the
        file must not lock every client out, nor leave the service open)."""
        try:
            keys = self._read()
        except KeyFileError as e:
            log.error("API keys not reloaded, the %d in use stay: %s", len(self.keys), e)
            return False
        self.keys = keys  # one reference swap: requests see the old or the new tuple, whole
        self.reloads += 1
        log.info("API keys reloaded from %s: %d keys", self.path, len(keys))
        return True

    def find(self, token: str) -> ApiKey | None:
        """The key `token` is, or None; compares the token's sha256 with every key's in
        constant time (no early exit, the same work whichever key matches or none)."""
        digest = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        found = None
        for key in self.keys:
            if hmac.compare_digest(digest, key.digest):
                found = key
        return found


def install_reload(ring: KeyRing) -> None:
    """Reload `ring` on SIGHUP (uvicorn handles SIGINT and SIGTERM only)."""
    import signal

    signal.signal(signal.SIGHUP, lambda signum, frame: ring.reload())


def client_headers(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The Authorization header for a client of `failfast serve`: `Bearer $FAILFAST_API_KEY`
    ({} when the variable is unset or empty)."""
    key = (os.environ if environ is None else environ).get(ENV, "").strip()
    return {"Authorization": f"Bearer {key}"} if key else {}


def is_loopback(host: str) -> bool:
    """Whether binding `host` reaches this machine only: a loopback address, `localhost`, or a
    name all of whose addresses are loopback ("" and 0.0.0.0 are every interface)."""
    h = host.strip().strip("[]")
    if h.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        pass
    if not h:
        return False
    try:
        infos = socket.getaddrinfo(h, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(i[4][0]).is_loopback for i in infos)


def check_bind(host: str, *, keys: bool, insecure_open: bool) -> None:
    """Refuse (ValueError) a non-loopback `host` without an API key file, unless
    `insecure_open` (the operator's own proxy authenticates)."""
    if keys or is_loopback(host):
        return
    if insecure_open:
        log.warning(
            "serving on %s with no API keys (--insecure-open): anyone who reaches it can "
            "open sessions, read /v1/status and post verdicts",
            host,
        )
        return
    raise ValueError(
        f"--host {host} is not a loopback address, and without --api-key-file anyone who can "
        "reach it could open sessions, read /v1/status and post verdicts: pass --api-key-file "
        "FILE (docs/USAGE.md, trust model), or --insecure-open when a proxy in front of it "
        "authenticates every call"
    )
