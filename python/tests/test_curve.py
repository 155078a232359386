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


@pytest.mark.parametrize("acked", [False, True])
def test_numbered_epochs_and_acked_delivery_over_curve(certs, acked):
    port = free_port()
    allowed = os.path.dirname(certs["client"][0])
    server = dict(curve_cert=certs["server"][1], curve_allow=allowed)
    client = dict(curve_cert=certs["client"][1], curve_server=certs["server"][0])
    # Acked delivery: the producer binds; otherwise the loader does.
    tx_url, rx_url = ((f"zrpush://127.0.0.1:{port}", f"zrpull://127.0.0.1:{port}") if acked
                      else (f"zpush://127.0.0.1:{port}", f"zpull://127.0.0.1:{port}"))
    with tenbin.Loader(rx_url, timeout=10, acked=acked, **(client if acked else server)) as rx, \
            tenbin.Connection(tx_url, producer="p", acked=acked, **(server if acked else client)) as tx:
        for epoch in range(2):
            for i in range(3):
                tx.send([np.full(4, 10 * epoch + i, "i4")])
            tx.end_epoch()
        tx.end_stream()
        assert [[int(b[0][0]) for b in rx] for _ in range(2)] == [[0, 1, 2], [10, 11, 12]]
        assert rx.stream_stats()["gaps"] == 0
        if acked:
            assert tx.delivery_stats()["sent"] >= 6
