"""One driver per experiment dir: DIR/driver.lock, the base layer's DirLock (an O_CREAT|O_EXCL
file holding host, pid and start time, kept fresh by a heartbeat that the driver beats while it
waits for its jobs). A second driver is refused with one line naming the holder; a dead one's
lock (pid gone on this host, or no heartbeat for ``stale_after`` seconds) is taken over with a
warning.
"""
from nnet_tools.dir_lock import DirLock

LOCK_NAME = "driver.lock"


class ExpLock(DirLock):
    def __init__(self, exp_dir, stale_after=600.0):
        super().__init__(exp_dir, LOCK_NAME, "another driver is running in this dir", stale_after)
