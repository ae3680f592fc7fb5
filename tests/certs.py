"""Test certificates: a CA, certificates it signs for 127.0.0.1 and localhost, and a rogue CA.

Made with the ``cryptography`` package (the ``test`` extra), in PEM files, as an operator would
make them with ``openssl`` (README, Security). EC P-256 keys: fast to generate, small.
"""
from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pem:
    """One party's files: its private key, its certificate and the CA certificates it trusts."""

    key: str
    cert: str
    truststore: str

    def options(self) -> dict[str, str]:
        """The ``security.ssl.*`` options that make a process use these files."""
        return {"security.ssl.enabled": "true", "security.ssl.key": self.key, "security.ssl.cert": self.cert,
                "security.ssl.truststore": self.truststore}


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.chmod(0o600)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


class CertificateAuthority:
    """A self-signed CA whose :meth:`issue` makes leaf certificates for the given hosts."""

    def __init__(self, directory: Path, name: str = "millstream-test-ca") -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.name = name
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(_name(name)).issuer_name(_name(name))
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .sign(self._key, hashes.SHA256())
        )
        self.cert_path = str(self.directory / f"{name}.pem")
        _write_cert(Path(self.cert_path), self._cert)

    def issue(self, name: str, hosts: tuple[str, ...] = ("127.0.0.1", "localhost"),
              truststore: str | None = None) -> Pem:
        """A key and a certificate for ``hosts`` (server and client use), signed by this CA; the
        party trusts ``truststore`` (default: this CA)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(name)).issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(self._key, hashes.SHA256())
        )
        key_path, cert_path = self.directory / f"{name}.key", self.directory / f"{name}.crt"
        _write_key(key_path, key)
        _write_cert(cert_path, cert)
        return Pem(str(key_path), str(cert_path), truststore or self.cert_path)
