"""A hashtag-like recommender stream: a small popular set that turns over within hours, and users' tastes.

The thesis (§3.3.1) recommends Twitter hashtags: 2.6 M west-coast tweets over 13 days, where a few
hashtags are popular at once and the popular set changes by the hour. No such data set ships offline, so
this module generates one from a documented model (parameters: :class:`RecommenderParams`):

* **Catalogue.** The model scores ``n_slots`` item slots (its classes). Each slot hosts a succession of
  hashtags: a hashtag is born, rises to its peak after ``tau`` hours and fades, with popularity
  ``h · x · exp(1 - x)``, ``x = (t - birth) / tau`` (an "alpha function": zero at birth, ``h`` at the
  peak, 10 % of ``h`` at ``x ≈ 4.9``). After ``life_span · tau`` the slot hosts a new hashtag, born at once.
  ``tau`` is lognormal (median ``peak_hours``) and the height ``h`` lognormal (``height_sigma``), so a few
  hashtags dominate each hour. Slots start at random phases. Each hashtag has a topic, uniform over
  ``n_topics``.
* **Users.** User ``u`` has topic affinities ``a[u]`` ~ Dirichlet(``topic_concentration``) and posts at
  ``events_per_user_day`` (scaled per user by a lognormal factor) at local hours drawn from the app-usage
  profile of sim/diurnal.py (or at times the caller gives, e.g. inside a DiurnalFleet's sessions).
* **One event.** With probability ``reuse_prob`` the user reuses one of their own recent hashtags
  (drawn in proportion to their decayed use counts; hashtag reuse is strong on Twitter, Kowald et al.
  2017); otherwise they pick slot ``s`` with probability
  ∝ ``pop_s(t) · exp(affinity_strength · a[u, topic_s])``.
* **Context features** (what a device knows before the event, ``n_topics + n_slots + 2`` floats): the
  user's recent topic profile (decayed topic counts, half-life ``memory_half_life_h``, normalised; at
  t = 0 seeded with ``warmup_events`` draws from ``a[u]``), their recent use of the hashtag in each slot
  (decayed counts, normalised; a slot's entry is cleared when the slot gets a new hashtag), and the
  local hour as (sin, cos).

A linear softmax over the slots (the ``recommender`` built-in bundle) can represent the choice rule
exactly: the bias of slot ``s`` is its log-popularity, which changes by the hour, and the weight from
topic features is the affinity term. That is the point of the experiment: a model updated hourly can
track the biases; one updated daily cannot.

Time advances in steps of ``step_s`` (15 min): popularity is evaluated at the middle of a step and the
users' profiles are updated at its end, so a generation is a few hundred vectorised steps (about a
second for 1,000 users over 3 days).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sim.diurnal import DAY, HOUR, DiurnalParams, sample_local_hours

__all__ = ["EventLog", "RecommenderParams", "RecommenderStream"]


@dataclass(frozen=True)
class RecommenderParams:
    """Every knob of the recommender stream's generative model."""

    n_slots: int = 100
    """Item slots the model scores (its classes); each hosts a succession of hashtags."""
    n_topics: int = 16
    """Topics; each hashtag has one, uniformly."""
    topic_concentration: float = 0.3
    """Dirichlet concentration of a user's topic affinities (small: a user cares about few topics)."""
    affinity_strength: float = 4.0
    """How much a user's affinity multiplies an item's popularity: factor ``exp(strength · a[u, topic])``."""
    peak_hours: float = 1.5
    """Median time from a hashtag's birth to its peak popularity, in hours."""
    peak_sigma: float = 0.5
    """Lognormal sigma of the time to peak."""
    life_span: float = 6.0
    """A hashtag occupies its slot for this many times its time-to-peak (then popularity is ~5 % of peak)."""
    height_sigma: float = 1.0
    """Lognormal sigma of a hashtag's peak popularity (heavy tail: few hashtags dominate)."""
    reuse_prob: float = 0.3
    """Probability that an event reuses one of the user's own recent hashtags."""
    memory_half_life_h: float = 6.0
    """Half-life, in hours, of the decayed counts behind reuse and the context features."""
    events_per_user_day: float = 20.0
    """Mean events per user per day (before the per-user rate factor)."""
    user_rate_sigma: float = 0.8
    """Lognormal sigma of the per-user rate factor (mean 1)."""
    warmup_events: int = 10
    """Pseudo-events drawn from a user's affinities to seed their topic profile at t = 0."""
    step_s: float = 900.0
    """Generation step in seconds: popularity is held for a step, profiles update at its end."""
    usage: DiurnalParams = field(default_factory=DiurnalParams)
    """The daily profile events' local hours are drawn from (sim/diurnal.py)."""

    @property
    def n_features(self) -> int:
        """Context features per event: topic profile, slot profile, sin and cos of the local hour."""
        return self.n_topics + self.n_slots + 2


@dataclass(frozen=True)
class EventLog:
    """Events sorted by time: ``(time, user, context features, item)``, plus the hashtag behind the slot."""

    time: np.ndarray  # float64 seconds, sorted
    user: np.ndarray  # int64
    item: np.ndarray  # int64 slot: the class label
    hashtag: np.ndarray  # int64 global hashtag id (slot + life), for analyses
    features: np.ndarray  # float32 (n, n_features)

    def __len__(self) -> int:
        return int(self.time.size)

    def between(self, t0: float, t1: float) -> EventLog:
        """The events with ``t0 <= time < t1``."""
        lo, hi = np.searchsorted(self.time, [t0, t1], side="left")
        return self._take(slice(lo, hi))

    def of_users(self, users: np.ndarray) -> EventLog:
        """The events of ``users``."""
        return self._take(np.isin(self.user, users))

    def _take(self, index: slice | np.ndarray) -> EventLog:
        return EventLog(
            self.time[index], self.user[index], self.item[index], self.hashtag[index], self.features[index]
        )


class RecommenderStream:
    """The catalogue and the users of one draw; :meth:`generate` produces their events."""

    def __init__(
        self, n_users: int, days: float, params: RecommenderParams = RecommenderParams(), *, seed: int = 0
    ):
        if n_users < 1 or days <= 0:
            raise ValueError("need at least one user and a positive number of days")
        self.params, self.n_users, self.days = params, n_users, days
        catalog, people, self._times_seed, self._choice_seed = np.random.SeedSequence(seed).spawn(4)
        self._draw_catalog(days * DAY, np.random.default_rng(catalog))
        p, rng = params, np.random.default_rng(people)
        self.affinity = rng.dirichlet(np.full(p.n_topics, p.topic_concentration), size=n_users)
        self.rate = rng.lognormal(-0.5 * p.user_rate_sigma**2, p.user_rate_sigma, n_users)

    def _draw_catalog(self, horizon: float, rng: np.random.Generator) -> None:
        """Per slot, the lives of its hashtags: births (padded with +inf), time to peak, height, topic."""
        p = self.params
        lives: list[list[tuple[float, float, float, int]]] = []
        for _ in range(p.n_slots):
            tau = p.peak_hours * HOUR * rng.lognormal(0.0, p.peak_sigma)
            birth = -rng.random() * p.life_span * tau  # a random phase at t = 0
            slot = []
            while birth < horizon + p.step_s:
                slot.append(
                    (birth, tau, float(rng.lognormal(0.0, p.height_sigma)), int(rng.integers(p.n_topics)))
                )
                birth += p.life_span * tau
                tau = p.peak_hours * HOUR * rng.lognormal(0.0, p.peak_sigma)
            lives.append(slot)
        k = max(len(s) for s in lives)
        self.births = np.full((p.n_slots, k), np.inf)
        self.taus = np.ones((p.n_slots, k))
        self.heights = np.zeros((p.n_slots, k))
        self.topics = np.zeros((p.n_slots, k), dtype=np.int64)
        for s, slot in enumerate(lives):
            for j, (b, tau, h, topic) in enumerate(slot):
                self.births[s, j], self.taus[s, j], self.heights[s, j], self.topics[s, j] = b, tau, h, topic
        self._lives_per_slot = k

    def life(self, t: float) -> np.ndarray:
        """Index of the hashtag living in each slot at ``t``: shape ``(n_slots,)``."""
        return np.maximum((self.births <= t).sum(axis=1) - 1, 0)

    def popularity(self, t: float) -> np.ndarray:
        """Each slot's popularity at ``t`` (unnormalised): the "most popular" ground truth."""
        rows = np.arange(self.params.n_slots)
        j = self.life(t)
        x = np.maximum(t - self.births[rows, j], 0.0) / self.taus[rows, j]
        return self.heights[rows, j] * x * np.exp(1.0 - x)

    def topic_at(self, t: float) -> np.ndarray:
        """Each slot's current hashtag's topic."""
        return self.topics[np.arange(self.params.n_slots), self.life(t)]

    def event_times(self) -> tuple[np.ndarray, np.ndarray]:
        """Default (times, users): per user and day a Poisson number of events at usage-profile hours."""
        p, rng = self.params, np.random.default_rng(self._times_seed)
        n_days = int(np.ceil(self.days))
        counts = rng.poisson(np.repeat(p.events_per_user_day * self.rate, n_days))
        users = np.repeat(np.repeat(np.arange(self.n_users), n_days), counts)
        day = np.repeat(np.tile(np.arange(n_days), self.n_users), counts)
        times = day * DAY + sample_local_hours(int(counts.sum()), rng, p.usage) * HOUR
        keep = times < self.days * DAY
        return times[keep], users[keep]

    def generate(self, times: np.ndarray | None = None, users: np.ndarray | None = None) -> EventLog:
        """The events at ``times`` by ``users`` (default: :meth:`event_times`), in time order.

        Deterministic given the seed: a second call with the same times gives the same log.
        """
        if times is None or users is None:
            times, users = self.event_times()
        times, users = np.asarray(times, dtype=float), np.asarray(users, dtype=np.int64)
        order = np.argsort(times, kind="stable")
        times, users = times[order], users[order]
        p = self.params
        rng = np.random.default_rng(self._choice_seed)
        topic_counts = rng.multinomial(p.warmup_events, self.affinity).astype(float)
        slot_counts = np.zeros((self.n_users, p.n_slots))
        decay = 0.5 ** (p.step_s / (p.memory_half_life_h * HOUR))
        items = np.empty(times.size, dtype=np.int64)
        hashtags = np.empty(times.size, dtype=np.int64)
        features = np.empty((times.size, p.n_features), dtype=np.float32)
        start = float(np.floor(times[0] / p.step_s) * p.step_s) if times.size else 0.0
        n_steps = int((times[-1] - start) // p.step_s) + 1 if times.size else 0
        bounds = np.searchsorted(times, start + p.step_s * np.arange(n_steps + 1))
        for k in range(bounds.size - 1):
            lo, hi = bounds[k], bounds[k + 1]
            t0 = start + k * p.step_s
            if hi > lo:
                u = users[lo:hi]
                features[lo:hi] = self._features(topic_counts[u], slot_counts[u], times[lo:hi])
                items[lo:hi] = self._choose(u, slot_counts[u], t0 + 0.5 * p.step_s, rng)
                life = self.life(t0 + 0.5 * p.step_s)
                hashtags[lo:hi] = items[lo:hi] * self._lives_per_slot + life[items[lo:hi]]
            before = self.life(t0 + 0.5 * p.step_s)
            topic_counts *= decay
            slot_counts *= decay
            if hi > lo:
                np.add.at(slot_counts, (users[lo:hi], items[lo:hi]), 1.0)
                topic = self.topic_at(t0 + 0.5 * p.step_s)
                np.add.at(topic_counts, (users[lo:hi], topic[items[lo:hi]]), 1.0)
            reborn = self.life(t0 + 1.5 * p.step_s) != before
            slot_counts[:, reborn] = 0.0
        return EventLog(times, users, items, hashtags, features)

    def _features(self, topic_counts: np.ndarray, slot_counts: np.ndarray, times: np.ndarray) -> np.ndarray:
        topic = topic_counts / np.maximum(topic_counts.sum(axis=1, keepdims=True), 1e-12)
        slot = slot_counts / np.maximum(slot_counts.sum(axis=1, keepdims=True), 1.0)
        angle = 2.0 * np.pi * (times % DAY) / DAY
        return np.hstack([topic, slot, np.sin(angle)[:, None], np.cos(angle)[:, None]])

    def _choose(
        self, users: np.ndarray, slot_counts: np.ndarray, t: float, rng: np.random.Generator
    ) -> np.ndarray:
        """One slot per event: a reuse of the user's recent hashtags, or a popularity × affinity draw."""
        p = self.params
        weight = self.popularity(t)[None, :] * np.exp(
            p.affinity_strength * self.affinity[users][:, self.topic_at(t)]
        )
        has_history = slot_counts.sum(axis=1) > 0
        reuse = (rng.random(users.size) < p.reuse_prob) & has_history
        weight[reuse] = slot_counts[reuse]
        cdf = np.cumsum(weight, axis=1)
        draw = rng.random(users.size) * cdf[:, -1]
        return np.minimum((cdf < draw[:, None]).sum(axis=1), p.n_slots - 1)
