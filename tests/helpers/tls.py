"""Certificates made for tests of TLS: a local CA, leaves it signs for chosen names and expiries,
and a self-signed certificate for 127.0.0.1, written as PEM files where a server needs them."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass
class Issued:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    def pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def files(self, directory) -> tuple[str, str]:
        cert_file = directory / f"{self.cert.serial_number}.pem"
        key_file = directory / f"{self.cert.serial_number}.key"
        cert_file.write_bytes(self.pem())
        key_file.write_bytes(
            self.key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        return str(cert_file), str(key_file)


def _builder(subject: str, issuer: x509.Name, key, expires: datetime) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(datetime.now(UTC) - timedelta(days=30))
        .not_valid_after(expires)
    )


def make_ca() -> Issued:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "aegis test CA")])
    cert = (
        _builder("aegis test CA", name, key, datetime.now(UTC) + timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_usage(key_cert_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .sign(key, hashes.SHA256())
    )
    return Issued(cert, key)


def make_leaf(ca: Issued, names: list[str], expires: datetime) -> Issued:
    key = ec.generate_private_key(ec.SECP256R1())
    alternatives = [_general_name(name) for name in names]
    authority = x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key())
    cert = (
        _builder(names[0], ca.cert.subject, key, expires)
        .add_extension(x509.SubjectAlternativeName(alternatives), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_usage(digital_signature=True), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)
        .add_extension(authority, critical=False)
        .sign(ca.key, hashes.SHA256())
    )
    return Issued(cert, key)


def _usage(*, digital_signature: bool = False, key_cert_sign: bool = False) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=digital_signature,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=key_cert_sign,
        crl_sign=key_cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _general_name(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def self_signed(directory) -> tuple[str, str]:
    """A certificate for 127.0.0.1 signed by its own key, and the key, as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "aegis test")])
    loopback = x509.IPAddress(ipaddress.ip_address("127.0.0.1"))
    cert = (
        _builder("aegis test", name, key, datetime.now(UTC) + timedelta(days=30))
        .add_extension(x509.SubjectAlternativeName([loopback]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return Issued(cert, key).files(directory)
