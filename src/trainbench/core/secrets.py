"""Keep secrets out of everything a run writes: MLflow params, tags, text artifacts, logs, Hydra's files.

A secret is the value of an environment variable whose name contains KEY, TOKEN, SECRET or PASSWORD
(``DATABENTO_API_KEY``, ``MLFLOW_TRACKING_PASSWORD``, ``HF_TOKEN``, ...), at least
:data:`MIN_SECRET_LEN` characters long (shorter values such as ``1`` or ``true`` are flags, not
secrets, and replacing them everywhere would mangle the record). Such a value is replaced by
:data:`REDACTED` wherever it appears, and a param or tag whose *name* says it is a secret
(``data.api_key``) is written as :data:`REDACTED` whatever its value. This module is the only place
that says what a secret is and how it is removed.

The values are read when a run starts (:func:`secret_values`), never stored.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

REDACTED = "***"
MIN_SECRET_LEN = 8
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD", re.IGNORECASE)
# Names that match the pattern but hold no secret (MLflow/Hydra settings, paths to key files are kept:
# a path names where a secret is, and is itself not one).
_NOT_SECRET_SUFFIXES = ("_PATH", "_FILE", "_DIR")


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(name)) and not name.upper().endswith(_NOT_SECRET_SUFFIXES)


#: Where a URI scheme starts (``postgresql+psycopg2://``, ``http://``): each URI in a value is checked.
URI_SCHEME = re.compile(r"(?<![A-Za-z0-9+.\-])([A-Za-z][A-Za-z0-9+.\-]*)://")
#: A password in a URI the way SQLAlchemy (and so MLflow's database stores) reads one: ``user:password@``
#: right after ``://``, the password running to the first ``@`` (it may hold ``/``).
_USER_PASSWORD = re.compile(r"[^:/@\s]*:[^@\s]+@")
#: A query or fragment parameter of a URI: ``?name=``, ``&name=``, ``;name=`` (ODBC), ``#name=``.
_URI_PARAM = re.compile(r"[?&;#]([^=&;#?/\s]+)=")
#: A parameter name that carries a secret: a password (``password``, ``passwd``, ``pwd``, libpq's
#: ``sslpassword``), a token, a secret, a credential, an API or access key, a signature (a presigned URL's
#: ``sig``, ``X-Amz-Signature``), an authorisation, a session, cookie or ticket.
_SECRET_PARAM = re.compile(r"pass|pwd|token|secret|credential|signature|^sig$|^auth$|authoriz|^key$|[-_.]key$|apikey|"
                           r"session|cookie|ticket", re.IGNORECASE)
#: ... except the names of files that hold a key or certificate (libpq's ``sslkey``, ``sslcert``; ``key_file``).
_KEY_FILE_PARAM = re.compile(r"(file|path|dir|cert|crl)$|^sslkey$", re.IGNORECASE)


def is_secret_param(name: str) -> bool:
    """Whether a URI query parameter named ``name`` (percent-encoded or not: ``p%61ssword``) carries a secret."""
    from urllib.parse import unquote_plus

    plain = unquote_plus(name).strip()
    return bool(_SECRET_PARAM.search(plain)) and not _KEY_FILE_PARAM.search(plain)


def uri_secret(rest: str) -> str | None:
    """What of one URI (``rest``: the text after its ``scheme://``) carries a secret, in words (``"a password"``,
    ``"the query parameter sslpassword"``), or None. The one rule of what a URI may not carry: a password in its
    user-info (``user:password@``) or a parameter whose name says it is a secret (:func:`is_secret_param`)."""
    if _USER_PASSWORD.match(rest):
        return "a password"
    names = [m.group(1) for m in _URI_PARAM.finditer(rest) if is_secret_param(m.group(1))]
    if names:
        return f"the query parameter{'s' if len(names) > 1 else ''} {', '.join(dict.fromkeys(names))}"
    return None


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """Values of the secret-named environment variables, longest first (so overlaps redact fully)."""
    env = os.environ if environ is None else environ
    vals = {v for k, v in env.items() if is_secret_name(k) and len(v) >= MIN_SECRET_LEN}
    return sorted(vals, key=len, reverse=True)


def secret_name_in(text: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The name of a secret environment variable whose value ``text`` contains, or None."""
    env = os.environ if environ is None else environ
    for k, v in sorted(env.items()):
        if is_secret_name(k) and len(v) >= MIN_SECRET_LEN and v in text:
            return k
    return None


def redact(text: str, secrets: Iterable[str] | None = None) -> str:
    for s in secret_values() if secrets is None else secrets:
        if s in text:
            text = text.replace(s, REDACTED)
    return text


def redact_mapping(items: Mapping[str, object], secrets: Iterable[str] | None = None) -> dict[str, str]:
    """Params or tags: secret-named keys get REDACTED, every value has secret values replaced."""
    secrets = secret_values() if secrets is None else list(secrets)
    out = {}
    for k, v in items.items():
        key = redact(str(k), secrets)
        last = key.rsplit(".", 1)[-1]
        out[key] = REDACTED if is_secret_name(last) and v not in (None, "None", "") else redact(str(v), secrets)
    return out


def redact_file(path: Path, secrets: Iterable[str] | None = None) -> bool:
    """Rewrite a text file in place without the secrets; returns whether it held one."""
    secrets = secret_values() if secrets is None else list(secrets)
    if not secrets:
        return False
    data = path.read_bytes()
    if not any(s.encode() in data for s in secrets):
        return False
    try:
        text = data.decode()
    except UnicodeDecodeError:
        for s in secrets:  # binary: replace bytes of the same length, so offsets stay valid
            data = data.replace(s.encode(), b"*" * len(s.encode()))
        path.write_bytes(data)
        return True
    path.write_text(redact(text, secrets))
    return True


class RedactingFilter(logging.Filter):
    """A handler filter that makes every record it passes safe to show and keep (message and traceback):
    secret values removed (:func:`redact`) and terminal controls shown as escapes
    (:func:`trainbench.core.safe_text.term`: a logged name with ESC/OSC sequences or bidi controls, which a
    rerun or a sweep logs, reaches neither the console nor the job log raw)."""

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        self.secrets = list(secrets)

    def filter(self, record: logging.LogRecord) -> bool:
        from trainbench.core.safe_text import term

        msg = record.getMessage()
        safe = term(redact(msg, self.secrets), keep_newlines=True)
        if safe != msg:
            record.msg, record.args = safe, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = term(redact(record.exc_text, self.secrets), keep_newlines=True)
        return True


def install_log_redaction(logger: logging.Logger | None = None) -> int:
    """Add a :class:`RedactingFilter` (secrets out, terminal controls escaped) to every handler of ``logger`` (default: root); returns how many.

    Handler filters see the records of every logger that propagates to the handler (a filter on the
    logger itself would not). Calling it again refreshes the secrets and adds no second filter.
    """
    secrets = secret_values()
    n = 0
    for h in (logger or logging.getLogger()).handlers:
        for f in [f for f in h.filters if isinstance(f, RedactingFilter)]:
            h.removeFilter(f)
        h.addFilter(RedactingFilter(secrets))
        n += 1
    return n


def redact_config(node: Any, secrets: Iterable[str] | None = None) -> None:
    """Replace secret values inside every string of an OmegaConf config, in place, keeping its types (a
    pickled config must stay a valid, typed config: byte-level redaction of the file would corrupt it)."""
    from omegaconf import DictConfig, ListConfig, read_write

    secrets = secret_values() if secrets is None else list(secrets)
    if not secrets:
        return
    keys = list(node.keys()) if isinstance(node, DictConfig) else range(len(node))
    for k in keys:
        child = node._get_node(k)
        if isinstance(child, DictConfig | ListConfig):
            redact_config(child, secrets)
            continue
        raw = child._value() if child is not None else None
        if isinstance(raw, str):
            new = redact(raw, secrets)
            if new != raw:
                with read_write(node):  # Hydra marks nodes such as hydra.overrides.task read-only
                    node[k] = new


def redact_tree(folder: Path, secrets: Iterable[str] | None = None) -> list[Path]:
    """Redact every file under ``folder`` (e.g. Hydra's ``.hydra/``); returns the files changed."""
    secrets = secret_values() if secrets is None else list(secrets)
    if not secrets or not folder.is_dir():
        return []
    return [p for p in sorted(folder.rglob("*")) if p.is_file() and redact_file(p, secrets)]
