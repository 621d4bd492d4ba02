"""Ed25519 signing keys, digests over canonical JSON, and which keys are trusted.

Two things are signed: a person's decision on a gated call
(``evalkit approvals approve|deny``) and a closed recording's manifest
(``evalkit.store.seal``). Both are signed over RFC 8785 canonical JSON, so a
signature survives any re-encoding that keeps the values, and both name the
key by a short id so a verifier knows which public key to try.

The private key lives in the state folder (``keys/evalkit.key``, mode 0600,
made on first use); the graded agent never sees that folder. A verifier
trusts that key, the public keys an operator put in ``trusted/`` of the state
folder, the files given with ``--trust`` or ``EVALKIT_TRUST``, and a
``evalkit.pub`` in the folder being verified or one above it (how a committed
corpus names the key it was signed with; whoever can change that file can
re-sign, which a review of the repository sees).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalkit.errors import EvalkitError
from evalkit.store.state import KEYS, TRUSTED, state_home

KEY_FILE = "evalkit.key"
PUBLIC_FILE = "evalkit.pub"
TRUST_ENV = "EVALKIT_TRUST"


def canonical(value: Any) -> bytes:
    """RFC 8785 canonical JSON of ``value``.

    A value RFC 8785 cannot encode (NaN, a lone surrogate) is encoded as
    sorted compact JSON instead, marked so the two can never collide: such
    arguments reach a gate rarely, and refusing to digest them would leave
    the call unapprovable.
    """
    import rfc8785

    try:
        return rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, UnicodeError, TypeError, ValueError):
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        return b"\x00not-i-json:" + text.encode("ascii")


def digest(value: Any) -> str:
    """``sha256:`` and the hex SHA-256 of ``value``'s canonical JSON."""
    return "sha256:" + hashlib.sha256(canonical(value)).hexdigest()


def call_digest(tool: str, arguments: Any) -> str:
    """What an approval is bound to: the tool's name and the arguments, exactly."""
    return digest({"tool": tool, "arguments": arguments})


def key_id(public_raw: bytes) -> str:
    """A public key's short name: the first 16 hex digits of its SHA-256."""
    return hashlib.sha256(public_raw).hexdigest()[:16]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: Any) -> bytes | None:
    if not isinstance(text, str):
        return None
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        return None


class Signer:
    """A private key that signs; ``public`` and ``key_id`` name it to verifiers."""

    def __init__(self, private: Any) -> None:
        from cryptography.hazmat.primitives import serialization

        self._private = private
        self.public_raw: bytes = private.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        self.key_id = key_id(self.public_raw)

    @property
    def public(self) -> str:
        """The public key, base64 of its 32 raw bytes."""
        return _b64(self.public_raw)

    @classmethod
    def generate(cls) -> Signer:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        return cls(Ed25519PrivateKey.generate())

    def sign(self, payload: bytes) -> str:
        """Base64 of the Ed25519 signature of ``payload``."""
        return _b64(self._private.sign(payload))

    def private_pem(self) -> bytes:
        from cryptography.hazmat.primitives import serialization

        return self._private.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption())

    def public_pem(self) -> bytes:
        return public_pem(self.public_raw)

    @classmethod
    def from_pem(cls, data: bytes, where: Path) -> Signer:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        try:
            private = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError) as exc:
            raise EvalkitError(f"{where} is not a readable private key: {exc}") from None
        if not isinstance(private, Ed25519PrivateKey):
            raise EvalkitError(f"{where} is not an Ed25519 private key")
        return cls(private)


def public_pem(public_raw: bytes) -> bytes:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    return Ed25519PublicKey.from_public_bytes(public_raw).public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def keys_folder(environ: Mapping[str, str] | None = None) -> Path:
    return state_home(environ) / KEYS


def local_signer(environ: Mapping[str, str] | None = None, *, create: bool = True
                 ) -> Signer | None:
    """This machine's signing key, from the state folder; made on first use (0600).

    Two processes making it at once agree on one key: each writes a private
    file and links it into place, which only one link can win.
    """
    folder = keys_folder(environ)
    path = folder / KEY_FILE
    try:
        return Signer.from_pem(path.read_bytes(), path)
    except FileNotFoundError:
        if not create:
            return None
    except OSError as exc:
        raise EvalkitError(f"cannot read the signing key {path}: {exc.strerror or exc}") from None
    signer = Signer.generate()
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not write_file(path, signer.private_pem(), 0o600, replace=False):
            signer = Signer.from_pem(path.read_bytes(), path)  # another process won
        write_file(folder / PUBLIC_FILE, signer.public_pem(), 0o644, replace=True)
    except OSError as exc:
        raise EvalkitError(f"cannot create the signing key in {folder}: {exc.strerror or exc} "
                           "(EVALKIT_HOME moves the state folder)") from None
    return signer


def write_signer(signer: Signer, folder: Path) -> None:
    """Put ``signer`` in ``folder`` as a state folder's key (record-corpus's own key)."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_file(folder / KEY_FILE, signer.private_pem(), 0o600, replace=True)
    write_file(folder / PUBLIC_FILE, signer.public_pem(), 0o644, replace=True)


def write_file(path: Path, data: bytes, mode: int, *, replace: bool) -> bool:
    """Write ``data`` to a private temporary file, fsync'd, then link (or, ``replace``,
    rename) it to ``path``; False when ``path`` existed and was not replaced. A key is
    never seen half-written. (Keys of every kind are written this one way.)"""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        if replace:
            os.replace(tmp, path)
            return True
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        return True
    finally:
        if tmp.exists():
            tmp.unlink()


#: The DER an Ed25519 SubjectPublicKeyInfo always is (RFC 8410): this prefix, then the key.
_ED25519_SPKI = bytes.fromhex("302a300506032b6570032100")


def read_public_key(path: Path) -> bytes:
    """The raw 32 bytes of an Ed25519 public key in a PEM file.

    The PEM evalkit writes is read by its fixed shape (a scorer checking seals
    need not import the key-file parsers, a third of what checking costs at
    small sizes); any other PEM goes to ``cryptography``'s loader.
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise EvalkitError(f"cannot read the public key {path}: {exc.strerror or exc}") from None
    lines = data.strip().splitlines()
    if len(lines) == 3 and lines[0] == b"-----BEGIN PUBLIC KEY-----" \
            and lines[2] == b"-----END PUBLIC KEY-----":
        der = _unb64(lines[1].decode("ascii", "replace"))
        if der is not None and len(der) == 44 and der.startswith(_ED25519_SPKI):
            return der[len(_ED25519_SPKI):]
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        raise EvalkitError(f"{path} is not a readable public key: {exc}") from None
    if not isinstance(key, Ed25519PublicKey):
        raise EvalkitError(f"{path} is not an Ed25519 public key")
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def signature_problem(public_raw: bytes, payload: bytes, signature: Any) -> str | None:
    """None when ``signature`` is ``public_raw``'s signature of ``payload``; else why not."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    raw = _unb64(signature)
    if raw is None:
        return "the signature is not base64"
    try:
        Ed25519PublicKey.from_public_bytes(public_raw).verify(raw, payload)
    except InvalidSignature:
        return "the signature does not match"
    except ValueError as exc:
        return f"the signature cannot be checked: {exc}"
    return None


@dataclass
class Trust:
    """The public keys a verifier accepts, each with where its trust came from."""

    keys: dict[str, tuple[bytes, str]] = field(default_factory=dict)

    def add(self, public_raw: bytes, where: str) -> None:
        self.keys.setdefault(key_id(public_raw), (public_raw, where))

    def add_file(self, path: Path) -> None:
        self.add(read_public_key(path), str(path))

    def check(self, key: Any, payload: bytes, signature: Any) -> str | None:
        """None when a trusted key ``key`` (an id) signed ``payload``; else why not."""
        found = self.keys.get(key) if isinstance(key, str) else None
        if found is None:
            return f"signed by key {key}, which is not trusted here"
        return signature_problem(found[0], payload, signature)

    def where(self, key: Any) -> str | None:
        found = self.keys.get(key) if isinstance(key, str) else None
        return None if found is None else found[1]

    @classmethod
    def local(cls, environ: Mapping[str, str] | None = None, extra: Iterable[Path] = (),
              beside: Iterable[Path] = ()) -> Trust:
        """This machine's key, the state folder's ``trusted/`` keys, ``EVALKIT_TRUST``
        and ``extra`` files, and an ``evalkit.pub`` in each of ``beside`` or above it."""
        env = os.environ if environ is None else environ
        trust = cls()
        own = keys_folder(env) / PUBLIC_FILE
        if own.is_file():
            trust.add_file(own)
        folder = state_home(env) / TRUSTED
        if folder.is_dir():
            for path in sorted(folder.glob("*.pub")):
                trust.add_file(path)
        named = [Path(p) for p in (env.get(TRUST_ENV) or "").split(os.pathsep) if p]
        for path in [*named, *extra]:
            trust.add_file(Path(path))
        for start in beside:
            for folder in [Path(start).absolute(), *Path(start).absolute().parents]:
                candidate = folder / PUBLIC_FILE
                if candidate.is_file():
                    trust.add_file(candidate)
                    break
        return trust
