"""Ed25519 signatures of compiled files, for models moved between machines.

The checksum of a file proves it is intact, not who wrote it: anyone can edit a file and
write a new checksum. A signed file carries an Ed25519 signature (RFC 8032, through the
`cryptography` package, imported only when signing or checking) of every byte before it,
made with a private key its author holds; `runtime.load(path, trusted_keys=[public key])`
runs it only when one of the keys verifies that signature. A key is a
cryptography Ed25519PrivateKey / Ed25519PublicKey or its 32 raw bytes.
"""
from .errors import RuntimeFailure

SIGNATURE_BYTES = 64
FLAG_SIGNED = 1  # in the prefix's flags word: a signature precedes the checksum


class SigningUnavailable(RuntimeFailure):
    """The `cryptography` package, which signs and checks files, is not installed."""


def _ed25519():
    try:
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise SigningUnavailable("signed files need the 'cryptography' package "
                                 "(pip install 'graphc[signing]')") from None
    return ed25519


def _private_key(key):
    ed25519 = _ed25519()
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return key
    if isinstance(key, (bytes, bytearray)) and len(key) == 32:
        return ed25519.Ed25519PrivateKey.from_private_bytes(bytes(key))
    raise TypeError(f"sign_with must be an Ed25519PrivateKey or its 32 raw bytes, got "
                    f"{type(key).__name__}")


def public_key(key):
    """The Ed25519PublicKey of `key` (a public or private key, or 32 raw public bytes)."""
    ed25519 = _ed25519()
    if isinstance(key, ed25519.Ed25519PublicKey):
        return key
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return key.public_key()
    if isinstance(key, (bytes, bytearray)) and len(key) == 32:
        return ed25519.Ed25519PublicKey.from_public_bytes(bytes(key))
    raise TypeError(f"a trusted key must be an Ed25519PublicKey or its 32 raw bytes, got "
                    f"{type(key).__name__}")


def sign(data, key):
    """The 64-byte signature of `data` with private `key`."""
    return _private_key(key).sign(bytes(data))


def signed_by(data, signature, keys):
    """Whether one of the public `keys` verifies `signature` of `data`."""
    from cryptography.exceptions import InvalidSignature
    for key in keys:
        try:
            public_key(key).verify(bytes(signature), bytes(data))
            return True
        except InvalidSignature:
            continue
    return False
