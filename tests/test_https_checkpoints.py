"""https checkpoints are downloaded with their certificate checked, then read as data
(docs/security.md, issue 43): a loopback TLS server this module starts with a throwaway
self-signed certificate, the client trusting that certificate alone (``SSL_CERT_FILE``, which
OpenSSL reads for Python's default context; ``SSL_CERT_DIR`` an empty folder).

A real training checkpoint loads through tools/test.py; a pickle payload is refused in one line;
a server whose certificate is not trusted is one line too, nothing downloaded.
"""
import datetime
import functools
import http.server
import ipaddress
import shutil
import ssl
import subprocess
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from test_checkpoint_safety import Payload, data_options, refused, tool

import afno_seg  # noqa: F401  (registers the loader)
from afno_seg.engine import run_tool

from conftest import TINY_CONFIG


def self_signed_certificate(folder: Path, name: str) -> tuple[Path, Path]:
    """``(certificate, key)`` PEM files of a throwaway certificate for 127.0.0.1 (its own CA):
    the ``cryptography`` package if installed, else the ``openssl`` command."""
    certificate, key = folder / f'{name}.crt', folder / f'{name}.key'
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
    except ImportError:
        if shutil.which('openssl') is None:
            pytest.skip('no certificate maker: neither the cryptography package nor openssl')
        subprocess.run(['openssl', 'req', '-x509', '-newkey', 'ec', '-pkeyopt',
                        'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1', '-subj',
                        f'/CN={name}', '-addext', 'subjectAltName=IP:127.0.0.1',
                        '-keyout', str(key), '-out', str(certificate)],
                       check=True, capture_output=True)
        return certificate, key
    private = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    public = private.public_key()
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(public).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address('127.0.0.1'))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(public),
                           critical=False)
            .sign(private, hashes.SHA256()))
    certificate.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key.write_bytes(private.private_bytes(serialization.Encoding.PEM,
                                          serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    return certificate, key


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # no request lines on stderr
        pass


@pytest.fixture
def https(tmp_path, monkeypatch):
    """``url`` of a loopback https server serving ``folder``; the client trusts ``trust`` (the
    server's certificate) alone; torch.hub's cache is ``tmp_path/torch_home``."""
    certificate, key = self_signed_certificate(tmp_path, 'afno-seg-test-server')
    folder, no_certificates = tmp_path / 'served', tmp_path / 'no_certificates'
    folder.mkdir()
    no_certificates.mkdir()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certificate, key)
    httpd = http.server.ThreadingHTTPServer(
        ('127.0.0.1', 0), functools.partial(_QuietHandler, directory=str(folder)))
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)  # a failed handshake:
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)  # ignored
    thread.start()
    monkeypatch.setenv('SSL_CERT_FILE', str(certificate))
    monkeypatch.setenv('SSL_CERT_DIR', str(no_certificates))
    monkeypatch.setenv('TORCH_HOME', str(tmp_path / 'torch_home'))
    for name in ('http_proxy', 'HTTP_PROXY', 'https_proxy', 'HTTPS_PROXY', 'all_proxy',
                 'ALL_PROXY'):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv('no_proxy', '127.0.0.1')
    try:
        yield SimpleNamespace(url=f'https://127.0.0.1:{httpd.server_address[1]}', folder=folder,
                              cache=tmp_path / 'torch_home' / 'hub' / 'checkpoints')
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def test_a_real_checkpoint_loads_over_https(https, tiny_trained, tiny_demo_data, tmp_path, capsys):
    served = https.folder / 'iter_6.pth'
    shutil.copy(tiny_trained.work_dir / 'iter_6.pth', served)
    code = run_tool(lambda: tool('tools/test.py').main([
        TINY_CONFIG, f'{https.url}/iter_6.pth', '--work-dir', str(tmp_path / 'work'),
        *data_options(tiny_demo_data)]))
    assert code == 0, capsys.readouterr().err[-3000:]
    assert (https.cache / 'iter_6.pth').read_bytes() == served.read_bytes()


def test_a_payload_over_https_is_refused_in_one_line(https, tiny_demo_data, tmp_path, capsys):
    marker = tmp_path / 'MARKER'
    torch.save({'state_dict': {}, 'meta': {'note': Payload(marker)}}, https.folder / 'evil.pth')
    url = f'{https.url}/evil.pth'
    err = refused(capsys, marker, tool('tools/test.py').main, TINY_CONFIG, url, '--work-dir',
                  str(tmp_path / 'work'), *data_options(tiny_demo_data))
    assert f'refused checkpoint {url}: reading it needs posix.system' in err, err
    assert len(err.strip().splitlines()) == 1, err


def test_an_untrusted_certificate_is_one_line(https, tiny_demo_data, tmp_path, monkeypatch,
                                              capsys):
    """The client trusts another throwaway certificate: the download fails, nothing is kept."""
    other, _ = self_signed_certificate(tmp_path, 'another-server')
    monkeypatch.setenv('SSL_CERT_FILE', str(other))
    torch.save({'state_dict': {}}, https.folder / 'm.pth')
    url = f'{https.url}/m.pth'
    err = refused(capsys, tmp_path / 'MARKER', tool('tools/test.py').main, TINY_CONFIG, url,
                  '--work-dir', str(tmp_path / 'work'), *data_options(tiny_demo_data))
    assert f'could not download checkpoint {url}: ' in err and 'CERTIFICATE_VERIFY_FAILED' in err
    assert len(err.strip().splitlines()) == 1, err
    assert not https.cache.exists() or not list(https.cache.iterdir())
