"""Quick modes of the experiments: each writes its PNG, JSON (with ``summary``) and markdown table."""

from __future__ import annotations

import json

import numpy as np
import pytest

from lab.experiments import EXPERIMENTS, run_experiment

pytestmark = pytest.mark.slow  # live experiments (quick plans) train for seconds each: the slow tier


def outputs_exist(out, name: str) -> dict:
    for ext in ("png", "json", "md"):
        assert (out / f"{name}.{ext}").stat().st_size > 0
    return json.loads((out / f"{name}.json").read_text())


def test_registry_names_every_experiment():
    assert {"staleness", "long-tail", "iid", "pruning", "async-vs-sync"} <= set(EXPERIMENTS)


@pytest.mark.timeout(120)
def test_staleness_quick_orders_strategies(tmp_path):
    run_experiment("staleness", quick=True, out_dir=tmp_path)
    data = outputs_exist(tmp_path, "staleness-quick")
    rows = data["summary"]["tables"]["D2/a"]
    final = {v: r["final_accuracy"][0] for v, r in rows.items()}
    # 100 updates under D2 are too few to separate the async strategies robustly (all near 10%); the
    # full run's tuning shows FedAvg-async failing at 0.4 (10% after 3,000 updates). Checked here: SSGD.
    for row in rows.values():  # the status column agrees with the curve it summarises
        for status, hit in zip(row["status"], row["per_seed"], strict=True):
            assert (status == "reached") == (hit is not None)
        # a run that did not reach 80% counts as the cap (censored), it does not vanish
        assert row["updates_to_80"]["censored"] == row["status"].count("not reached") + row["status"].count(
            "diverged"
        )
        assert row["updates_to_80"]["per_seed"] == [h if h is not None else 100 for h in row["per_seed"]]
    assert rows["ssgd"]["status"] == ["reached"]
    # SSGD (no staleness) needs the fewest updates, and computes more gradients than it makes updates
    assert final["ssgd"] >= max(final["adasgd"], final["dynsgd"])
    assert rows["ssgd"]["gradients"]["median"] > rows["dynsgd"]["gradients"]["median"]
    # Fleet's default runs in protocol (b) at its own rate, untuned, with its saving over DynSGD
    from server.strategies import default_strategy

    name, rate = default_strategy()
    assert data["summary"]["default"] == name and name not in data["summary"]["tuned_lr"]
    row = data["summary"]["tables"]["D2/b"][name]
    assert row["lr"] == rate and "saving_over_dynsgd_pct" in row
    assert name not in data["summary"]["tables"]["D2/a"]


@pytest.mark.timeout(120)
def test_long_tail_quick_writes_recall_and_weights(tmp_path):
    data = run_experiment("long-tail", quick=True, out_dir=tmp_path)
    outputs_exist(tmp_path, "long-tail-quick")
    for v in ("adasgd", "dynsgd"):
        series = data["series"][v]
        assert len(series["recall0"]) == len(series["updates"]) and series["weights"]
        assert 48 in series["staleness"]
    # τ_thres is fixed at 12 with the staleness cap on: AdaSGD dampens a τ = 48 straggler as if τ were
    # 12, so it weighs every such gradient more than DynSGD's 1/(48 + 1)
    stale = {
        v: [
            w
            for w, t in zip(data["series"][v]["weights"], data["series"][v]["staleness"], strict=True)
            if t == 48
        ]
        for v in ("adasgd", "dynsgd")
    }
    assert stale["dynsgd"] == pytest.approx([1 / 49] * len(stale["dynsgd"]), abs=1e-5)  # stored rounded
    assert min(stale["adasgd"]) > 1 / 49


@pytest.mark.timeout(120)
def test_pruning_quick_drops_about_the_asked_fraction(tmp_path):
    data = run_experiment("pruning", quick=True, out_dir=tmp_path)
    outputs_exist(tmp_path, "pruning-quick")
    rows = {r["p"]: r for r in data["summary"]["rows"]}
    assert rows[0.0]["fraction_dropped"]["median"] == 0.0
    assert 0.25 < rows[0.392]["fraction_dropped"]["median"] < 0.5


@pytest.mark.timeout(150)
def test_async_vs_sync_quick_has_staleness_only_where_async(tmp_path):
    data = run_experiment("async-vs-sync", quick=True, out_dir=tmp_path)
    outputs_exist(tmp_path, "async-vs-sync-quick")
    table = data["summary"]["tables"]["a"]["arms"]
    assert table["ssgd-wait-all"]["staleness_median"] == [0.0]
    assert table["adasgd"]["staleness_median"][0] > 0
    # Fleet's default: its own rate in both protocols, never tuned
    from server.strategies import default_strategy

    name, rate = default_strategy()
    assert data["summary"]["default"] == {"strategy": name, "learning_rate": rate}
    assert "default" not in data["summary"]["tuned_lr"]
    for proto in ("a", "b"):
        assert "default" in data["summary"]["tables"][proto]["time_over_adasgd"]
    assert data["series"]["a/default/1"] == data["series"]["b/default/1"]  # one run: the same rate in both
    # the overhead run computed the gradients it was asked for, without evaluation
    assert data["summary"]["sim_overhead_1000_devices"]["gradients"] == 30
    # each arm's time over AdaSGD's is computed from the censored-filled per-seed times
    ratios = data["summary"]["tables"]["a"]["time_over_adasgd"]
    base = table["adasgd"]["virtual_seconds_to_80"]["per_seed"][0]
    for arm, ratio in ratios.items():
        assert ratio["per_seed"][0] == pytest.approx(
            table[arm]["virtual_seconds_to_80"]["per_seed"][0] / base
        )


@pytest.mark.timeout(180)
def test_default_search_quick_chooses_on_one_half_and_reports_on_the_other(tmp_path):
    from server.settings import Settings

    run_experiment("default-search", quick=True, out_dir=tmp_path)
    data = outputs_exist(tmp_path, "default-search-quick")
    s = data["summary"]
    choice, held = s["choice_workloads"], s["held_back_workloads"]
    assert set(choice).isdisjoint(held) and list(s["held_back"]) == held
    # the candidates were ranked on the choice half only; the chosen one's rate curve is on the other
    assert s["chosen"] in s["choice"] and s["chosen"] == f"{s['default']}@{s['default_rate']}"
    runs = data["runs"]
    assert not any(r["run"]["workload"] in choice and r["run"]["lr"] == 4 * s["default_rate"] for r in runs)
    for wl in held:
        h = s["held_back"][wl]
        assert h["target"] == pytest.approx(h["best_final"] - 0.01, abs=1e-4)
        # every configuration counts, a miss included, judged on the mean of its seeds (others than the
        # choice half's, and more of them)
        mine = [r for r in runs if r["run"]["workload"] == wl and r["run"]["seed"] in s["seeds"]["held_back"]]
        assert {r["run"]["seed"] for r in mine} == set(s["seeds"]["held_back"]) != set(s["seeds"]["choice"])
        by_config: dict[tuple, list[float]] = {}
        for r in mine:
            by_config.setdefault((r["run"]["arm"], r["run"]["lr"]), []).append(r["final"])
        assert {len(f) for f in by_config.values()} == {len(s["seeds"]["held_back"])} != {1}
        assert h["best_final"] == pytest.approx(max(np.mean(f) for f in by_config.values()), abs=1e-4)
        assert {float(f) for f in h["rate_curve"]} == {1.0, 4.0}
        # and against a configuration tuned on the other seed, for each seed
        assert len(h["cross_seed"]["folds"]) == len(s["seeds"]["held_back"])
        # and the default with the configurations tuned on those seeds, run again on seeds none was judged on
        again = [r for r in runs if r["run"]["workload"] == wl and r["run"]["seed"] in s["seeds"]["fresh"]]
        assert set(s["seeds"]["fresh"]).isdisjoint(s["seeds"]["held_back"]) and again
        default = f"{s['default']}@{s['default_rate']}"
        tuned = {h["fresh_seeds"]["tuned"], h["fresh_seeds"]["highest"], default}
        assert {f"{r['run']['arm']}@{r['run']['lr']}" for r in again} == tuned
        mine_again = [r["final"] for r in again if f"{r['run']['arm']}@{r['run']['lr']}" == default]
        assert h["fresh_seeds"]["default"]["final"] == pytest.approx(np.mean(mine_again), abs=1e-4)
    checks = {"reaches_target", "within_1.1x", "final_within_0.5", "no_divergence_x0.25_to_x4"}
    elsewhere = {"within_1.1x_tuned_elsewhere", "final_within_0.5_tuned_elsewhere"}
    fresh = {"reaches_target_fresh_seeds", "within_1.1x_fresh_seeds", "final_within_0.5_fresh_seeds"}
    assert set(s["passed"]) == checks | elsewhere | fresh
    assert s["shipped"]["strategy"] == Settings(_env_file=None).strategy.name
    text = (tmp_path / "default-search-quick.md").read_text()
    assert "Held-back workloads" in text and "Choice half" in text


@pytest.mark.timeout(180)
def test_robust_quick_chooses_on_the_tuning_seed_and_reports_the_heatmap_on_others(tmp_path):
    run_experiment("robust", quick=True, out_dir=tmp_path)
    data = outputs_exist(tmp_path, "robust-quick")
    s = data["summary"]
    assert not set(s["tune_seeds"]) & set(s["seeds"]) and s["tune_seed"] == s["tune_seeds"][0]
    assert s["recommended"] in s["choice"] and s["recommended"] != "none"
    assert s["reported"][0] == "none" and s["recommended"] in s["reported"]
    runs = data["runs"]
    for seed in s["tune_seeds"]:  # every defence chosen among tried on every tuning seed, the clean beside
        tuning = {(r["run"]["defence"], r["run"]["attack"]) for r in runs if r["run"]["seed"] == seed}
        assert {d for d, _ in tuning} == set(s["choice"]) | {"none"} and ("none", "sign-flip") not in tuning
        assert set(s["choice_seeds"][str(seed)]) == set(s["choice"])
    # ranked by the standing summed over the tuning seeds
    assert min(s["choice_standing"].values()) == s["choice_standing"][s["recommended"]]
    # a gap is the clean undefended fleet's final minus the run's, on the same seed
    seed, fleet = s["seeds"][0], next(iter(s["fleets"]))
    final = {(r["run"]["defence"], r["run"]["attack"]): r["final"] for r in runs if r["run"]["seed"] == seed}
    judged = s["heatmap"][fleet]["none"][0]
    assert judged["gaps"]["sign-flip"] == pytest.approx(
        final["none", None] - final["none", "sign-flip"], abs=1e-4
    )
    attacked = next(r for r in runs if r["run"]["attack"] == "sign-flip")
    assert attacked["attackers"] == 3 and attacked["pushes"]["byzantine"] > 0  # 3 of 10 pushed
    assert final["none", "sign-flip"] < final["none", None] - 0.2  # the attack hurts an undefended fleet
    # the bound: the same fleet with every attacker push lost on the way
    lead = s["bound"][fleet][str(s["share"])][str(seed)]
    assert lead == pytest.approx(final["none", None] - final["none", "silent"], abs=1e-4)
    silent = next(r for r in runs if r["run"]["attack"] == "silent")
    assert silent["pushes"]["byzantine"] == silent["pushes"]["byzantine_dropped"] > 0
    assert "Recommended" in (tmp_path / "robust-quick.md").read_text()


@pytest.mark.timeout(180)
def test_adasgd_why_quick_records_every_gradient(tmp_path):
    run_experiment("adasgd-why", quick=True, out_dir=tmp_path)
    data = outputs_exist(tmp_path, "adasgd-why-quick")
    adasgd, dynsgd = data["arms"][:2]
    assert len(adasgd["weight"]) == len(adasgd["tau"]) == 400
    # DynSGD applies exactly 1/(τ+1); AdaSGD's boost lifts the typical non-IID batch above it
    np_tau = dynsgd["tau"]
    assert all(abs(w - 1 / (t + 1)) < 1e-9 for w, t in zip(dynsgd["weight"], np_tau, strict=True))
    assert data["summary"]["arms"][0]["weight_vs_dynsgd"] > 1.2


@pytest.mark.timeout(120)
def test_dp_staleness_quick_reports_both_accountings(tmp_path):
    run_experiment("dp-staleness", quick=True, out_dir=tmp_path)
    data = outputs_exist(tmp_path, "dp-staleness-quick")
    s = data["summary"]
    assert s["epsilons"] == ["1", "inf"] and s["sigma"]["inf"] is None and s["sigma"]["1"] > 0
    for key in ("1/a", "1/b", "inf/a", "inf/b"):
        rows = s["tables"][key]
        assert set(rows) == {"adasgd", "dynsgd"} and "saving_over_dynsgd_pct" in rows["adasgd"]
        for row in rows.values():  # a miss counts as the cap, marked, never dropped
            assert row["updates_to_80"]["censored"] == row["per_seed"].count(None)
            assert len(row["updates_to_80"]["per_seed"]) == len(s["seeds"])
    # σ was calibrated to ε in the pooled view; the per-device ledger charges far more for the same σ
    acct = s["accounting"]["1"]
    assert acct["pooled"]["epsilon_rdp"] == pytest.approx(1.0, abs=0.01)
    assert acct["pooled"]["epsilon_replace_one"] > acct["pooled"]["epsilon_pld"]  # replace-one costs more
    ledger = acct["ledger"]
    assert ledger["sampling_rate"] == 1.0 and ledger["relation"] == "replace-one" and ledger["delta"] == 1e-8
    assert ledger["epsilon"] > 2 * acct["pooled"]["epsilon_rdp"]
    # DP runs reach less than the same runs without DP, at the same rate and seed
    assert s["tables"]["1/b"]["dynsgd"]["final"][0] < s["tables"]["inf/b"]["dynsgd"]["final"][0]
    text = (tmp_path / "dp-staleness-quick.md").read_text()
    assert "Fleet's own ledger" in text and "The thesis's claim" in text


@pytest.mark.timeout(120)
def test_mapa_quick_reports_both_samplers_and_the_seed_claims(tmp_path):
    run_experiment("mapa", quick=True, out_dir=tmp_path)
    data = outputs_exist(tmp_path, "mapa-quick")
    assert set(data["summary"]) == {"exact", "paper"}
    assert {r["sampler"] for r in data["fig5"]} == {"exact", "paper"}
    runs = {(r["method"], r["bound"]) for r in data["fig5"]}
    assert runs >= {("audp", 15.0), ("audp", 0.2), ("mapa", 200.0)}
    assert all(r["epsilon_per_device"] == pytest.approx(0.2) for r in data["fig5"])  # 200 steps / 100 edges
    assert {r["method"] for r in data["fig7"]} == {"asgd", "audp", "mapa"}
    # through the core: every push applied as one version (τ = K − 1 ≤ τ_max, nothing dropped)
    every = data["fig5"] + data["fig6"] + data["fig7"]
    assert all(r["updates"] == r["iterations"] and r["dropped"] == 0 for r in every)
    text = (tmp_path / "mapa-quick.md").read_text()
    assert "does NOT give the stated ε" in text and "Seed claims beside ours" in text


@pytest.mark.timeout(120)
def test_vandijk_quick_runs_the_three_parts_with_the_ledgers_epsilon(tmp_path):
    run_experiment("vandijk", quick=True, out_dir=tmp_path)
    data = outputs_exist(tmp_path, "vandijk-quick")
    assert [r["rounds"] for r in data["table3"]] == [20, 5]  # 1,000 gradients / 5 devices / size
    assert [r["updates"] for r in data["table3"]] == [100, 25]  # through the core: one version per round-sum
    assert all(r["per_client"] >= 200 for r in data["fig1a"])
    inc = next(r for r in data["fig1b"] if r["schedule"] == "linear")
    constant = [r for r in data["fig1b"] if r["schedule"] == "constant"]
    assert inc["sizes"][:3] == [16, 18, 19] and {r["sizes"][0] for r in constant} == {16}
    assert inc["rounds"] < constant[0]["rounds"] and constant[0]["epsilon"] > 0
    assert inc["aggregated_noise_in_C"] == pytest.approx(8.0 * inc["rounds"] ** 0.5)
    assert "Seed claim" in (tmp_path / "vandijk-quick.md").read_text()


@pytest.mark.timeout(120)
def test_adp2sgd_quick_compares_sync_and_gossip_with_the_ledgers_epsilon(tmp_path):
    run_experiment("adp2sgd", quick=True, out_dir=tmp_path)
    data = outputs_exist(tmp_path, "adp2sgd-quick")
    row = data["summary"]["table1"]["logreg"]["medium"]
    assert row["gap"] == pytest.approx(row["adp2sgd"] - row["sync"])
    assert 0 < row["sync_epsilon"] <= row["adp2sgd_epsilon"] * 1.05  # per learner, same σ and q
    case2 = data["summary"]["wall_clock"]["logreg"]["one-10x"]
    assert case2["sync_total_seconds"] > 5 * case2["adp2sgd_total_seconds"]  # SYNC waits for the slow one
    slow = next(r for r in data["runs"] if r["case"] == "one-10x" and r["method"] == "adp2sgd")
    assert slow["steps_per_learner"][0] < 0.2 * max(slow["steps_per_learner"])
    text = (tmp_path / "adp2sgd-quick.md").read_text()
    assert "compare the gaps" in text.lower() and "EfficientNet-B0" in text and "Theorem 2" in text


@pytest.mark.timeout(120)
def test_kardam_quick_counts_drops_by_sender_and_filter(tmp_path):
    data = run_experiment("kardam", quick=True, out_dir=tmp_path)
    outputs_exist(tmp_path, "kardam-quick")
    tables = data["summary"]["tables"]
    assert set(tables) == {"clean/exp", "clean/inverse", "attack/kardam", "attack/no-filter", "dp/1"}
    for run in data["runs"]:
        c = run["counts"]
        assert c["honest"] + c["byz"] == run["arm"]["gradients"] or run["diverged"]
        dropped = (c["honest_lipschitz"] + c["honest_frequency"]) / c["honest"]
        assert run["honest_drop_ratio"] == pytest.approx(dropped)
        assert (c["byz"] > 0) == (run["arm"]["attackers"] > 0)
    # f = 0 is the dampening alone: nothing filtered, so the attack reaches the model
    no_filter = tables["attack/no-filter"]
    assert no_filter["honest_drop_ratio"]["median"] == no_filter["byzantine_filtered"]["median"] == 0.0
    # with the filters on most −10g gradients are dropped, and the quantile drops honest ones too (≈ f/n)
    assert tables["attack/kardam"]["byzantine_filtered"]["median"] > 0.5
    assert 0.1 < tables["clean/exp"]["honest_drop_lipschitz"]["median"] < 0.5
    text = (tmp_path / "kardam-quick.md").read_text()
    assert "27.9%" in text and "19.6%" in text and "live" not in data["summary"]
    # the coefficient comparison runs on the tuning seed only, both kinds, clean and attacked
    compared = data["summary"]["coefficients"]
    assert {(r["coefficient"], r["warmup"], r["attackers"]) for r in compared} == {
        (c, w, a) for c, w in (("worker", "accept"), ("server", "accept"), ("worker", "drop")) for a in (0, 3)
    }
    assert all(r["byzantine_filtered"] is None for r in compared if not r["attackers"])
    assert "Worker- or server-level coefficient (seed 1000 only" in text and "| server, accept | 3 |" in text


def test_kardam_live_verdict_counts_the_gap_in_test_digits():
    from lab.experiments.kardam_live import verdict, within

    assert 0.881 - 0.861 > 0.02 and within(0.881 - 0.861)  # exactly 20 of 1,000 digits
    assert not within(0.882 - 0.861)
    pairs = [
        {"clean": {"accuracy": c}, "attacked": {"accuracy": a}} for c, a in ((0.896, 0.873), (0.881, 0.861))
    ]
    out = verdict(pairs)
    assert [p["met"] for p in out["pairs"]] == [False, True] and out["met_pairs"] == 1
    assert not out["met"]  # median 2.15 points


def test_kardam_live_table_reports_every_seed_and_the_median_verdict():
    from lab.experiments.kardam_report import live_markdown

    def fleet(accuracy: float, attackers: int) -> dict:
        return {"accuracy": accuracy, "version": 100, "gradients": 600, "attacker_applied": 1,
                "attacker_pushes": 60 * attackers, "honest_dropped": 5, "honest_pushes": 600 - 60 * attackers,
                "dropped_lipschitz": 3, "dropped_frequency": 2}  # fmt: skip

    pairs = [
        {"seed": s, "clean": fleet(0.9, 0), "attacked": fleet(0.9 - g, 3), "gap": g, "met": g <= 0.02}
        for s, g in ((11, 0.01), (12, 0.05), (13, 0.015))
    ]
    live = {"setup": "setup", "pairs": pairs, "gap_median": 0.015, "met_pairs": 2, "met": True}
    text = "\n".join(live_markdown(live))
    assert text.count("| attacked |") == 3 and "| 12 | attacked | 0.850 |" in text
    assert "median gap 1.5 points, within 2 points on 2 of 3 seeds → **met**" in text


@pytest.mark.timeout(120)
def test_wkafl_quick_fills_tables_2_and_3_beside_the_seed(tmp_path):
    run_experiment("wkafl", quick=True, out_dir=tmp_path)
    data = outputs_exist(tmp_path, "wkafl-quick")
    summary = data["summary"]
    assert set(summary["table2"]) == {"100", "150", "300"} and set(summary["table3"]) == {"1", "5", "10"}
    assert summary["table3"]["1"] == summary["table2"]["300"]  # the same runs, as in the seed's tables
    for row in [*summary["table2"].values(), *summary["table3"].values()]:
        assert set(row) == {"wkafl", "twafl", "sasgd"}
        assert all(0 <= cell["final_accuracy"] <= 1 and cell["stability"] >= 0 for cell in row.values())
    assert data["tuning"]["seed"] == 100 and {r["seed"] for r in data["runs"]} == {0}  # tuned on another seed
    assert {len(r["curve"]) for r in data["runs"]} == {11}  # w_0 and every 4th of 40 iterations
    assert {(r["updates"], r["refused"]) for r in data["runs"]} == {(40, 0)}  # the core steps once per K
    assert {r["paper_level"] for r in data["runs"]} == {100, 150, 300}
    text = (tmp_path / "wkafl-quick.md").read_text()
    assert "*0.9728*" in text and "*0.0834*" in text and "Seed claim beside ours" in text


@pytest.mark.timeout(60)
def test_online_vs_standard_quick_matches_budgets_and_scores_every_arm(tmp_path):
    run_experiment("online-vs-standard", quick=True, out_dir=tmp_path)
    data = outputs_exist(tmp_path, "online-vs-standard-quick")
    row = data["summary"]["streams"]["recommender"]
    assert row["metric"] == "f1@5"
    assert set(row["mean"]) == {"online", "standard", "standard-frequent", "popular", "oracle"}
    assert all(0.0 <= v <= 1 / 3 for v in row["mean"].values())  # F1@5 with one relevant item: ≤ 2 / 6
    assert all(len(days) == 2 for days in row["days"].values())  # the warm-up day, then the scored one
    # the same gradient budget: every learning arm spends what online spent (within a round's rounding)
    budget = row["examples"]["online"][0]
    assert budget > 0 and row["examples"]["popular"] == [0]
    for arm in ("standard", "standard-frequent", "oracle"):
        assert abs(row["examples"][arm][0] - budget) <= 0.1 * budget, arm
    assert row["online"]["tasks"] > 0 and row["energy"]["mean"] > 0
    assert "online / standard" in (tmp_path / "online-vs-standard-quick.md").read_text()


def test_the_robust_choice_ranks_attacks_held_before_honest_work_dropped():
    """Centered clipping losing 6 attacks by up to 74 points must not outrank a defence that loses 4 by up
    to 12 but drops honest work under each attack (what the first rule did, counting a miss per attack)."""
    from lab.experiments.robust import standing

    lossy = {"gaps": {"a": 0.7, "b": 0.5, "c": 0.01}, "worst_gap": 0.7, "misses": ["a", "b"]}
    strict = {"gaps": {"a": 0.12, "b": 0.01, "c": 0.01}, "worst_gap": 0.12,
              "misses": ["a", "drop:a", "drop:b", "drop:c", "drop:clean", "backdoor-success"]}  # fmt: skip
    assert standing(strict) == (1, 6.0, 1) and standing(lossy) == (2, 35.0, 0)
    assert sorted([lossy, strict], key=standing)[0] is strict


def test_the_robust_choice_counts_each_backdoor_trigger_as_an_attack():
    """A defence that stops one trigger of two outranks one that stops neither at a smaller worst gap."""
    from lab.experiments.robust import standing

    gaps = {"sign-flip": 0.01, "backdoor": 0.01, "backdoor-inset": 0.01}
    neither = {"gaps": gaps, "worst_gap": 0.013, "misses": ["backdoor-success"],
               "backdoor_by_trigger": {"backdoor": 1.0, "backdoor-inset": 0.99}}  # fmt: skip
    one = {"gaps": gaps, "worst_gap": 0.018, "misses": ["backdoor-success"],
           "backdoor_by_trigger": {"backdoor": 0.004, "backdoor-inset": 0.7}}  # fmt: skip
    assert standing(neither) == (2, 10.0, 0) and standing(one) == (1, 7.0, 0)
    lossy = {**one, "gaps": {**gaps, "backdoor-inset": 0.05}, "worst_gap": 0.05}  # lost twice over: once
    assert standing(lossy)[0] == 1


def test_the_robust_choice_weighs_a_lost_attack_against_its_target():
    """One attack lost each: a trigger at 77% success is a worse loss than a gap of 2.2 points, though the
    first defence's worst gap (1.8 points) is the smaller."""
    from lab.experiments.robust import standing

    trigger_lost = {"gaps": {"alie": 0.018, "backdoor-inset6": 0.01}, "worst_gap": 0.018,
                    "misses": ["backdoor-success"],
                    "backdoor_by_trigger": {"backdoor-inset6": 0.775}}  # fmt: skip
    gap_lost = {"gaps": {"alie": 0.022, "backdoor-inset6": 0.008}, "worst_gap": 0.022, "misses": ["alie"],
                "backdoor_by_trigger": {"backdoor-inset6": 0.066}}  # fmt: skip
    assert standing(trigger_lost)[:2] == (1, 7.75) and standing(gap_lost)[:2] == (1, 1.1)
    assert sorted([trigger_lost, gap_lost], key=standing)[0] is gap_lost


def test_the_robust_choice_does_not_charge_a_defence_for_what_a_perfect_filter_loses_too():
    """At a horizon where losing the attackers' compute costs 2.1 points, gaps of 2.1-2.3 points are the
    perfect filter's plus noise: a defence with those outranks one letting a trigger in at 73%."""
    from lab.experiments.robust import standing

    near_bound = {"gaps": {"alie": 0.021, "sign-flip-head": 0.023, "backdoor-inset6": 0.01},
                  "worst_gap": 0.023, "misses": ["alie", "sign-flip-head"],
                  "backdoor_by_trigger": {"backdoor-inset6": 0.06}}  # fmt: skip
    trigger_in = {"gaps": {"alie": 0.016, "sign-flip-head": 0.016, "backdoor-inset6": 0.01},
                  "worst_gap": 0.016, "misses": ["backdoor-success"],
                  "backdoor_by_trigger": {"backdoor-inset6": 0.73}}  # fmt: skip
    assert standing(near_bound)[0] == 2 and standing(near_bound, bound=0.021)[0] == 0
    assert sorted([trigger_in, near_bound], key=lambda j: standing(j, bound=0.021))[0] is near_bound
    assert standing({**near_bound, "gaps": {"alie": 0.027}}, bound=0.021)[0] == 1  # 0.6 points past it: lost


def test_the_recommended_defence_is_the_one_the_robust_experiment_chose():
    """RECOMMENDED_DEFENCE (what `fleet demo --robust` runs) is, wrapper for wrapper, the defence the last
    full `fleet experiment robust` recommended (docs/results/robust.json)."""
    import json
    from pathlib import Path

    from lab.experiments.robust import DEFENCES
    from server.strategies import RECOMMENDED_DEFENCE

    results = Path(__file__).resolve().parents[1] / "docs" / "results" / "robust.json"
    chosen = json.loads(results.read_text())["summary"]["recommended"]
    assert tuple(DEFENCES[chosen]) == tuple(RECOMMENDED_DEFENCE), chosen


@pytest.mark.timeout(180)
def test_default_search_with_no_choice_half_checks_its_one_candidate_on_the_held_back_half(tmp_path):
    from dataclasses import replace

    from lab.experiments.default_search import QUICK_PLAN
    from lab.runner import run as run_entry

    with pytest.raises(ValueError, match="exactly one candidate"):
        run_entry("default-search", quick=True, out_dir=tmp_path, plan=replace(QUICK_PLAN, choice=()))
    plan = replace(QUICK_PLAN, choice=(), candidates=(("fedbuff-equal", 0.4),))
    s = run_entry("default-search", quick=True, out_dir=tmp_path, plan=plan).summary
    assert s["choice"] == {} and s["choice_workloads"] == [] and s["chosen"] == "fedbuff-equal@0.4"
    assert set(s["judged"]) == set(s["held_back"]) == {"labels2-mlp"}
    text = (tmp_path / "default-search-quick.md").read_text()
    assert "Held-back workloads" in text and "Choice half" not in text and "chose nothing" in text
