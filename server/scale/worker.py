"""An API worker (docs/scale-out.md): grants tasks and validates pushes like the single process, but
queues each valid push for the aggregator instead of applying it, and follows the versions it publishes.

Its core is a plain ``Coordinator`` that server/compose.py builds with the ``Enqueue`` sink
(server/core/pushes.py) and ``FollowStorage`` (server/core/following.py). A push is answered once its
queue row is committed (the journal's group commit, as for an applied push), with ``queued=True``: its
weight and the version it makes are the aggregator's to decide. What is the worker's own is here: the
listener that calls ``Coordinator.follow`` on each of the aggregator's announcements."""

from __future__ import annotations

from server.core.coordinator import Coordinator
from server.core.pushes import queued_meta
from server.scale.announce import VersionListener
from server.settings import Settings

__all__ = ["follow_versions", "queued_meta"]


def follow_versions(settings: Settings, coordinator: Coordinator) -> VersionListener:
    """A started listener for the aggregator's announcements (the worker polls storage without them)."""
    listener = VersionListener(settings.redis_url, coordinator.follow)
    listener.start()
    return listener
