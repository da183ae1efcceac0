"""One owner per directory: a lock file made with O_CREAT|O_EXCL (atomic on NFS v3+, where flock
may not work), holding host, pid and start time, kept fresh by a heartbeat (its mtime, touched by
``beat``: no thread, so no fork-with-threads hazards).

A second owner is refused with one line naming the holder. A lock is stale, and is taken over with
a warning, when its pid is dead on this host, or when its heartbeat is older than ``stale_after``
seconds (an owner on another host that died with its node). The experiment dir's driver.lock
(driver/exp_lock.py) and the egs dir's (data/get_egs.py, steps/get_egs.sh) are this lock.
``pid`` holds it for another process (a shell step, through a program it runs).
"""
import json
import os
import socket
import sys
import time

from nnet_tools.errors import NnetError
from nnet_tools.fileio import pid_alive, writing


class DirLock:
    def __init__(self, directory, name, refusal, stale_after=600.0, pid=None):
        self.path = os.path.join(directory, name)
        self.refusal, self.stale_after = refusal, stale_after
        self.mine = {"host": socket.gethostname(), "pid": pid if pid is not None else os.getpid(),
                     "started": time.strftime("%Y-%m-%d %H:%M:%S")}
        self._beaten = float("-inf")

    def holder(self):
        """The lock's contents and its age in seconds, or None when there is no lock."""
        try:
            with open(self.path) as f:
                text = f.read()
            age = time.time() - os.stat(self.path).st_mtime
        except FileNotFoundError:
            return None
        try:
            return json.loads(text), age
        except ValueError:  # a holder killed between create and write: judge by age alone
            return {"host": "?", "pid": -1, "started": "?"}, age

    def stale(self, info, age):
        if info["host"] == self.mine["host"] and info["pid"] > 0:
            return not pid_alive(info["pid"])
        return age > self.stale_after

    def acquire(self):
        for _ in range(3):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                found = self.holder()
                if found is None:
                    continue  # released meanwhile
                info, age = found
                if not self.stale(info, age):
                    raise NnetError(f"{self.path}: {self.refusal} (host {info['host']}, pid "
                                    f"{info['pid']}, started {info['started']}, heartbeat {age:.0f} s ago)")
                print(f"WARNING: {self.path}: taking over a stale lock (host {info['host']}, pid {info['pid']}, "
                      f"started {info['started']}, heartbeat {age:.0f} s ago)", file=sys.stderr, flush=True)
                try:
                    os.unlink(self.path)
                except FileNotFoundError:
                    pass
                continue
            try:
                with writing(self.path), os.fdopen(fd, "w") as f:
                    json.dump(self.mine, f)
            except NnetError:   # a full disk, say: no half-written lock is left to refuse the next run
                os.unlink(self.path)
                raise
            return self
        raise NnetError(f"{self.path}: could not take the lock (it keeps changing hands)")

    def beat(self, every=0.0):
        """Freshen the heartbeat; with ``every``, only when the last beat is older than that."""
        now = time.monotonic()
        if every and now - self._beaten < every:
            return
        self._beaten = now
        try:
            os.utime(self.path)
        except OSError:
            pass

    def release(self):
        found = self.holder()
        if found and found[0].get("pid") == self.mine["pid"] and found[0].get("host") == self.mine["host"]:
            os.unlink(self.path)

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()
