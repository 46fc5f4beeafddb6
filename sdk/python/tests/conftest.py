"""A real boxd for the SDK's tests, started from ``BOXD_BIN`` on a socket of
its own (``DIR/run/boxd.sock``, ``DIR/home``, DIR a fresh 0700 directory
under /tmp), with ``BOXD_TEST_IMAGE`` (an OCI layout) as the image.

Every box the tests made is removed before the daemon is stopped (boxes'
supervisors outlive the daemon by design); then boxd gets SIGTERM and is
waited for.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from typing import Iterator, List

import pytest

import boxd


def _need(var: str) -> str:
    value = os.environ.get(var)
    if not value:
        pytest.skip(f"{var} is not set (see tests/tests/sdk_python.rs)", allow_module_level=True)
    return value


class Daemon:
    """One boxd on a private socket and home; restartable on the same ones."""

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.dir = tempfile.mkdtemp(prefix="boxd-sdk-py.", dir="/tmp")
        os.chmod(self.dir, 0o700)
        self.socket = os.path.join(self.dir, "run", "boxd.sock")
        self.home = os.path.join(self.dir, "home")
        self.log = os.path.join(self.dir, "boxd.log")
        self.proc: "subprocess.Popen[bytes]"
        self.start()

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [self.binary, "--socket", self.socket, "--home", self.home],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                boxd.Client(self.socket, start=False).close()
                return
            except boxd.DaemonNotRunning:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"boxd exited {self.proc.returncode}: {self.tail()}") from None
                time.sleep(0.05)
        raise RuntimeError(f"boxd did not answer within 20 s: {self.tail()}")

    def stop(self) -> None:
        """SIGTERM, and wait for it to exit."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def restart(self) -> None:
        self.stop()
        self.start()

    def tail(self) -> str:
        with open(self.log, "rb") as f:
            return f.read()[-4000:].decode("utf-8", "replace")


@pytest.fixture(scope="session")
def image() -> str:
    return _need("BOXD_TEST_IMAGE")


@pytest.fixture(scope="session")
def daemon() -> Iterator[Daemon]:
    d = Daemon(_need("BOXD_BIN"))
    try:
        yield d
    finally:
        try:
            if d.proc.poll() is None:
                with boxd.Client(d.socket, start=False) as c:
                    for info in c.boxes():
                        c.box(info.name).remove(force=True)
        finally:
            d.stop()
            shutil.rmtree(d.dir, ignore_errors=True)


@pytest.fixture
def client(daemon: Daemon) -> Iterator[boxd.Client]:
    with boxd.Client(daemon.socket, start=False) as c:
        yield c


@pytest.fixture
def box(client: boxd.Client, image: str) -> Iterator[boxd.Box]:
    """A fresh running box, removed after the test."""
    b = client.create_or_reuse(f"t-{uuid.uuid4().hex[:10]}", image=image)
    try:
        yield b
    finally:
        b.remove(force=True)


@pytest.fixture
def scratch() -> Iterator[str]:
    d = tempfile.mkdtemp(prefix="boxd-sdk-py-scratch.", dir="/tmp")
    os.chmod(d, 0o700)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def names(events: List[boxd.BoxEvent]) -> List[str]:
    return [e.name for e in events]
