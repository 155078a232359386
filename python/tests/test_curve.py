"""CURVE through Connection and Loader, with certificates pyzmq makes."""
import os

import numpy as np
import pytest
import zmq.auth

import tenbin
from conftest import free_port


@pytest.fixture
def certs(tmp_path):
    made = {}
    for name in ("server", "client", "intruder"):
        folder = tmp_path / name
        folder.mkdir()
        public, secret = zmq.auth.create_certificates(str(folder), name)
        os.chmod(secret, 0o600)
        made[name] = (public, secret)
    return made


def test_curve_delivers_to_allowed_clients_only(certs):
    port = free_port()
    allowed = os.path.dirname(certs["client"][0])
    rx = tenbin.Connection(f"zpull://127.0.0.1:{port}", timeout=5,
                           curve_cert=certs["server"][1], curve_allow=allowed)
    tx = tenbin.Connection(f"zpush://127.0.0.1:{port}", curve_cert=certs["client"][1],
                           curve_server=certs["server"][0])
    tx.send([np.arange(1000, dtype="f4")])
    got = rx.recv()
    assert np.array_equal(got[0], np.arange(1000, dtype="f4"))
    # A client whose key is not in the folder delivers nothing.
    bad = tenbin.Connection(f"zpush://127.0.0.1:{port}", curve_cert=certs["intruder"][1],
                            curve_server=certs["server"][0], send_timeout=0.5)
    try:
        bad.send([np.zeros(3, "u1")])
    except tenbin.Timeout:
        pass
    with pytest.raises(tenbin.Timeout):
        rx.recv(timeout=1)
    bad.close()
    tx.close()
    rx.close()


def test_a_readable_secret_certificate_is_refused(certs):
    os.chmod(certs["client"][1], 0o644)
    with pytest.raises(tenbin.Error) as err:
        tenbin.Connection(f"zpush://127.0.0.1:{free_port()}", curve_cert=certs["client"][1],
                          curve_server=certs["server"][0])
    assert "600" in str(err.value)
