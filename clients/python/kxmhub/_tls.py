from __future__ import annotations

import asyncio
import os
import re
import socket
import ssl
import urllib.parse

from pyqwest import HTTPTransport, HTTPVersion

from ._errors import HubError

PathLike = str | os.PathLike[str]

# What the HTTP client (pyqwest, on rustls) says of a failed handshake it can name.
_TLS_MESSAGE = re.compile(r"invalid peer certificate|received fatal alert|InvalidContentType|InvalidMessage|CorruptMessage|peer is incompatible", re.I)


def is_tls_message(message: str) -> bool:
    """True when an HTTP client's error message is about a failed TLS handshake."""
    return bool(_TLS_MESSAGE.search(message))


def _read(name: str, path: PathLike) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise HubError("invalid_tls_config", f"cannot read {name} {os.fspath(path)}: {e.strerror}", {"file": os.fspath(path)}) from e
    if b"-----BEGIN" not in data:
        raise HubError("invalid_tls_config", f"{name} {os.fspath(path)} holds no PEM data", {"file": os.fspath(path)})
    return data


def transport(tls_ca: PathLike | None, tls_cert: PathLike | None, tls_key: PathLike | None) -> HTTPTransport:
    """The library's HTTP/2 transport with the TLS files read: `tls_ca` trusted instead of the
    system's CAs (which are trusted without it), `tls_cert` and `tls_key` presented to a hub with
    mutual TLS. Raises HubError invalid_tls_config naming a file it cannot use."""
    if (tls_cert is None) != (tls_key is None):
        raise HubError("invalid_tls_config", "tls_cert and tls_key go together: a client certificate needs its private key")
    ca = _read("tls_ca", tls_ca) if tls_ca is not None else None
    if tls_cert is not None:
        try:
            ssl.create_default_context().load_cert_chain(tls_cert, tls_key)
        except (OSError, ssl.SSLError) as e:
            raise HubError("invalid_tls_config", f"cannot use tls_cert {os.fspath(tls_cert)} with tls_key {os.fspath(tls_key)}: {e}") from e
    return HTTPTransport(
        http_version=HTTPVersion.HTTP2,
        tls_ca_cert=ca,
        tls_include_system_certs=ca is None,
        tls_cert=_read("tls_cert", tls_cert) if tls_cert is not None else None,
        tls_key=_read("tls_key", tls_key) if tls_key is not None else None,
    )


def _handshake(url: str, tls_ca: PathLike | None, tls_cert: PathLike | None, tls_key: PathLike | None) -> tuple[str, str] | None:
    u = urllib.parse.urlsplit(url)
    ctx = ssl.create_default_context(cafile=tls_ca)
    if tls_cert is not None:
        ctx.load_cert_chain(tls_cert, tls_key)
    # h2 first: a hub that took the handshake speaks at once (its SETTINGS), so the read returns.
    ctx.set_alpn_protocols(["h2", "http/1.1"])
    try:
        with socket.create_connection((u.hostname, u.port or 443), timeout=5) as raw, ctx.wrap_socket(raw, server_hostname=u.hostname) as s:
            if s.recv(1) != b"":
                return None
    except ssl.SSLCertVerificationError as e:
        return e.reason or "CERTIFICATE_VERIFY_FAILED", e.verify_message or str(e)
    except ssl.SSLError as e:
        return e.reason or "SSL_ERROR", str(e)
    except ConnectionResetError:
        pass
    except OSError:
        return None
    if tls_cert is None:
        return None
    return "ECONNRESET", "the hub closed the connection right after the TLS handshake: a hub with mutual TLS does so when its client CA did not sign tls_cert"


async def diagnose(url: str, tls_ca: PathLike | None, tls_cert: PathLike | None, tls_key: PathLike | None) -> HubError | None:
    """Why TLS with an https:// hub fails, by one handshake of the standard library's own (the
    HTTP client reports a refused client certificate only as a closed connection): a HubError
    tls_failed with the TLS reason in `metadata["tlsCode"]`, or None when the handshake succeeds."""
    if urllib.parse.urlsplit(url).scheme != "https":
        return None
    found = await asyncio.to_thread(_handshake, url, tls_ca, tls_cert, tls_key)
    if found is None:
        return None
    code, reason = found
    return HubError("tls_failed", f"TLS with the hub failed: {code}: {reason}", {"tlsCode": code})
