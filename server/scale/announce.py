"""New versions announced over Redis pub/sub: the aggregator publishes, every API worker listens.

An announcement only says "look again": a worker reads the version itself from PostgreSQL, and also
looks every ``poll_s`` without one, so a lost message (Redis restarting, a slow subscriber) delays a
worker's newest parameters by at most that long and never serves anything uncommitted."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable

import redis

log = logging.getLogger("fleet.server")
CHANNEL = "fleet:versions"


class VersionAnnouncer:
    """The aggregator's side: best effort, since workers poll too."""

    def __init__(self, url: str) -> None:
        self.redis = redis.Redis.from_url(url, socket_timeout=1.0, socket_connect_timeout=1.0)

    def announce(self, model_id: str, version: int) -> None:
        try:
            self.redis.publish(CHANNEL, json.dumps({"model_id": model_id, "version": version}))
        except redis.RedisError as exc:
            log.warning("could not announce version %d over Redis (%s); workers will poll", version, exc)

    def close(self) -> None:
        self.redis.close()


class VersionListener(threading.Thread):
    """A worker's side: calls ``on_version`` for each announcement, and every ``poll_s`` without one."""

    def __init__(self, url: str, on_version: Callable[[], None], *, poll_s: float = 1.0) -> None:
        super().__init__(name="fleet-version-listener", daemon=True)
        self.url, self.on_version, self.poll_s = url, on_version, poll_s
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            try:
                self._listen()
            except redis.RedisError as exc:
                log.warning("version announcements unavailable (%s); polling every %.1f s", exc, self.poll_s)
                self._call()
                self.stopped.wait(self.poll_s)

    def _listen(self) -> None:
        client = redis.Redis.from_url(self.url, socket_connect_timeout=1.0)
        pubsub = client.pubsub(ignore_subscribe_messages=True)
        try:
            pubsub.subscribe(CHANNEL)
            while not self.stopped.is_set():
                pubsub.get_message(timeout=self.poll_s)  # an announcement, or a poll's worth of silence
                self._call()
        finally:
            pubsub.close()
            client.close()

    def _call(self) -> None:
        try:
            self.on_version()
        except Exception:  # the listener must outlive a database hiccup
            log.exception("following the newest version failed")

    def stop(self) -> None:
        self.stopped.set()
