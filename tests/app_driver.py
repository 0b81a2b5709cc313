"""Drives the real Kivy app through a person's session and writes what it saw to a JSON file.

Run by tests/test_app_ui.py under Xvfb (``python tests/app_driver.py --server URL --key KEY ...``):
fill Settings and tap Save, draw digits with touch events along strokes in *Try the model*, label
them (the phone's only training data), watch three tasks reach the Status screen, pause, resume.
Touches go through Kivy's event loop (``UnitTestTouch``), as a finger's would. The app's frame
intervals and RSS while it trains are recorded for android-build/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

SIZE = (420, 780)
SEVEN = [(0.22, 0.82), (0.78, 0.82), (0.62, 0.55), (0.45, 0.15)]
ONE = [(0.52, 0.86), (0.5, 0.5), (0.48, 0.14)]

Step = float | Callable[[], bool] | tuple[Callable[[], bool], float]


def tap(widget: Any) -> None:
    from kivy.tests.common import UnitTestTouch

    touch = UnitTestTouch(*widget.to_window(*widget.center))
    touch.touch_down()
    touch.touch_up()


def draw(pad: Any, stroke: list[tuple[float, float]], steps: int = 12) -> None:
    """One finger stroke along ``stroke`` (fractions of the pad), with the moves in between."""
    from kivy.tests.common import UnitTestTouch

    def at(fx: float, fy: float) -> tuple[float, float]:
        return pad.to_window(pad.x + fx * pad.width, pad.y + fy * pad.height)

    touch = UnitTestTouch(*at(*stroke[0]))
    touch.touch_down()
    for (ax, ay), (bx, by) in zip(stroke[:-1], stroke[1:], strict=True):
        for i in range(1, steps + 1):
            t = i / steps
            touch.touch_move(*at(ax + (bx - ax) * t, ay + (by - ay) * t))
    touch.touch_up()


def screenshot(folder: str | None, name: str) -> None:
    if not folder:
        return
    from kivy.core.window import Window

    Path(folder).mkdir(parents=True, exist_ok=True)
    made = Window.screenshot(name=str(Path(folder) / f"{name}.png"))  # Kivy appends a counter
    if made:
        os.replace(made, Path(folder) / f"{name}.png")


def session(app: Any, args: argparse.Namespace, out: dict[str, Any]) -> Iterator[Step]:
    from client.app.main import rss_bytes

    root, control = app.root, app.controller
    settings, status, trying = root.ids.settings, root.ids.status, root.ids.try_model
    yield 0.5
    out["first_screen"] = root.ids.screens.current
    settings.ids.server_url.text, settings.ids.enrollment_key.text = args.server, args.key
    yield 0.5
    tap(settings.ids.save)
    yield 0.5
    out["settings_note"] = settings.ids.note.text
    screenshot(args.screenshots, "app-settings")
    yield (lambda: control.status().state == "setup", 15.0)
    tap(root.ids.tab_status)
    yield 0.8  # the status screen refreshes twice a second
    out["first_run"] = {"state": control.status().state, "label": status.ids.state.text,
                        "message": status.ids.message.text, "color": list(status.state_color)}  # fmt: skip
    screenshot(args.screenshots, "app-first-run")

    tap(root.ids.tab_try)
    yield 0.6
    guesses = []
    for stroke, digit in ((SEVEN, 7), (ONE, 1), (SEVEN, 7)):
        draw(trying.ids.pad, stroke)
        image = trying.image()
        yield (lambda: "%" in trying.ids.guess.text, 20.0)
        guesses.append({"digit": digit, "text": trying.ids.guess.text, "image": image.tolist(),
                        "version": control.model.version, "model_id": control.model.model_id})  # fmt: skip
        if len(guesses) == 1:
            screenshot(args.screenshots, "app-try")
        tap(trying.ids.labels.children[::-1][digit])
        yield 0.2
    out["guesses"] = guesses
    out["drawings"] = len(control.drawings)
    out["drawing_labels"] = control.drawings.y.tolist()

    tap(root.ids.tab_status)
    started = time.perf_counter()
    yield (lambda: control.status().done >= 3, 40.0)
    out["train_seconds"] = time.perf_counter() - started
    # 3 drawings: it rests once a task has used them all (one computed before the third drawing was labelled
    # used 2 and rested too, until the third ended that rest: wait for the rest after all 3, as the screen
    # shows it, since the screen redraws from the controller only twice a second)
    yield (lambda: status.ids.state.text == "Resting" and "all 3 " in status.ids.message.text, 30.0)
    out["resting"] = {"label": status.ids.state.text, "message": status.ids.message.text,
                      "rows": [r.batch_size for r in control.status().tasks]}  # fmt: skip
    yield 0.6
    chart = status.ids.chart
    lines = [list(i.points) for i in chart.canvas.children if type(i).__name__ == "Line"]
    out["chart"] = {name: {"ticks": list(p.ticks), "slo": p.slo, "slo_y": p.slo_y, "left": p.left,
                           "right": p.right} for name, p in chart.panels.items()}  # fmt: skip
    out["chart_lines"] = lines
    app.frames.reset()  # the measured window: 3 s of the UI while the worker trains back to back
    done = control.status().done
    yield 3.0
    out["measure"] = {**app.frames.summary(), "tasks": control.status().done - done, "seconds": 3.0}
    out["rss"], out["rss_peak"] = rss_bytes()
    out["status_rows"] = status.ids.rows.text
    out["status_state"] = status.ids.state.text
    screenshot(args.screenshots, "app-status")

    tap(status.ids.pause)
    yield 1.0  # a task in flight may still finish
    paused_at = control.status().done
    yield 2.0
    out["paused"] = {"label": status.ids.state.text, "button": status.ids.pause.text,
                     "done_at_pause": paused_at, "done_after_2s": control.status().done,
                     "saved": control.settings.paused}  # fmt: skip
    tap(status.ids.pause)
    yield (lambda: control.status().done > paused_at, 20.0)
    out["resumed"] = control.status().done

    app.on_pause()  # Android sent the app to the background
    yield 1.0
    background = control.status().done
    yield 1.5
    out["background"] = {"state": control.status().state, "done": background, "after": control.status().done}
    app.on_resume()
    yield (lambda: control.status().done > background, 20.0)
    out["token_saved"] = bool(control.settings.device_token)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--folder", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--screenshots", default="")
    parser.add_argument("--rest", type=float, default=0.5)
    args = parser.parse_args()
    os.environ["KIVY_NO_ARGS"] = "1"
    from kivy.config import Config

    Config.set("graphics", "width", str(SIZE[0]))
    Config.set("graphics", "height", str(SIZE[1]))
    from kivy.clock import Clock

    from client.app.controller import AppController
    from client.app.main import FleetApp

    # a short rest: the session still sees it, then trains back to back for the frame measurement
    app = FleetApp(controller=AppController(Path(args.folder), rest_seconds=args.rest))
    out: dict[str, Any] = {}
    steps: Iterator[Step] | None = None

    def advance(_dt: float) -> None:
        nonlocal steps
        try:
            steps = steps or session(app, args, out)
            step = next(steps)
        except StopIteration:
            app.stop()
            return
        except Exception:
            out["error"] = traceback.format_exc()
            app.stop()
            return
        if isinstance(step, int | float):
            Clock.schedule_once(advance, step)
            return
        check, timeout = step if isinstance(step, tuple) else (step, 30.0)
        deadline = time.monotonic() + timeout

        def poll(_dt: float) -> None:
            if check():
                advance(0)
            elif time.monotonic() > deadline:
                out["error"] = f"timed out at step {len(out)}: {app.controller.status()}"
                app.stop()
            else:
                Clock.schedule_once(poll, 0.1)

        Clock.schedule_once(poll, 0.1)

    Clock.schedule_once(advance, 0.5)
    app.run()
    Path(args.out).write_text(json.dumps(out, indent=1))
    return 1 if "error" in out else 0


if __name__ == "__main__":
    sys.exit(main())
