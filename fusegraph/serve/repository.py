"""The model repository at run time: which models are loaded, their state, load and unload.

A model that fails to load is recorded as UNAVAILABLE with the reason and does not stop the others.
Loading a model again replaces it once the new version is ready; the old one drains its queue first.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from . import config as cfg
from .errors import ModelConfigError, ModelNotFoundError, ServeError, UnavailableError
from .instances import load_instances
from .scheduler import Scheduler
from .stats import ModelStats


@dataclass
class LoadedModel:
    model: object              # a ServedModel (thread isolation) or a RemoteModel (process isolation)
    scheduler: Scheduler
    stats: ModelStats

    @property
    def name(self) -> str:
        return self.model.name

    @property
    def version(self) -> str:
        return str(self.model.version)


@dataclass
class ModelState:
    state: str                 # READY, LOADING, UNAVAILABLE (Triton's names)
    reason: str = ""
    version: str = ""
    loaded: LoadedModel | None = None


class Repository:
    def __init__(self, source: Path, default_target: str, cores: int | None = None, isolation: str | None = None):
        self.source = Path(source)
        self.default_target, self.cores, self.isolation = default_target, cores, isolation
        self._single = self.source.is_file()
        if not self._single and not self.source.is_dir():
            raise ModelConfigError(f"{self.source}: neither a model repository folder nor a model file")
        self._states: dict[str, ModelState] = {}
        self._lock = threading.Lock()

    def names(self) -> list[str]:
        if self._single:
            return [self.source.stem]
        return list(cfg.scan_repository(self.source))

    def _entry(self, name: str) -> cfg.ModelEntry:
        if self._single:
            if name != self.source.stem:
                raise ModelNotFoundError(f"unknown model {name!r}: this server serves {self.source.stem!r}")
            return cfg.single_file_entry(self.source)
        folder = self.source / name
        if name.startswith(".") or "/" in name or not folder.is_dir():
            raise ModelNotFoundError(f"unknown model {name!r}: no folder {folder}")
        return cfg.read_entry(folder)

    def load(self, name: str) -> ModelState:
        """Load (or reload) `name`'s latest version; a failure is kept as the model's state and raised."""
        with self._lock:
            old = self._states.get(name)
            if old is None or old.loaded is None:
                self._states[name] = ModelState("LOADING")
        path = self.source
        try:
            entry = self._entry(name)
            version, path = entry.latest
            model, executors = load_instances(entry, version, path, self.default_target, self.cores, self.isolation)
        except ModelNotFoundError:
            with self._lock:
                self._states.pop(name, None)
            raise
        except ServeError as e:
            self._set_failed(name, str(e))
            raise
        except Exception as e:  # a model that fails to parse or compile is reported by its status
            reason = f"{path}: {type(e).__name__}: {e}"
            self._set_failed(name, reason)
            raise ModelConfigError(f"model {name!r} failed to load: {reason}") from e
        stats = ModelStats(name, str(version))
        try:
            loaded = LoadedModel(model, Scheduler(model, stats, executors), stats)
        except ServeError as e:  # a scheduling field the config gets wrong
            for ex in {id(x): x for x in executors}.values():
                if hasattr(ex, "close"):
                    ex.close()
            self._set_failed(name, str(e))
            raise
        with self._lock:
            old = self._states.get(name)
            self._states[name] = ModelState("READY", version=str(version), loaded=loaded)
        if old is not None and old.loaded is not None:
            old.loaded.scheduler.close(drain=True)
        return self._states[name]

    def _set_failed(self, name: str, reason: str) -> None:
        with self._lock:
            st = self._states.get(name)
            if st is None or st.loaded is None:
                self._states[name] = ModelState("UNAVAILABLE", reason)
            # else: the old version keeps serving; Triton does the same when a reload fails

    def load_all(self) -> None:
        for name in self.names():
            with contextlib.suppress(ServeError):  # recorded in the model's state (RepositoryIndex shows it)
                self.load(name)

    def unload(self, name: str, drain: bool = True) -> None:
        with self._lock:
            st = self._states.get(name)
            if st is None or st.loaded is None:
                raise ModelNotFoundError(f"model {name!r} is not loaded")
            self._states[name] = ModelState("UNAVAILABLE", "unloaded", st.version)
        st.loaded.scheduler.close(drain=drain)

    def get(self, name: str, version: str = "") -> LoadedModel:
        with self._lock:
            st = self._states.get(name)
        if st is None:
            raise ModelNotFoundError(f"unknown model {name!r}")
        if st.loaded is None:
            raise UnavailableError(f"model {name!r} is not ready ({st.state}{': ' + st.reason if st.reason else ''})")
        if version and version != st.loaded.version:
            raise ModelNotFoundError(f"model {name!r} has no version {version!r} loaded "
                                     f"(version {st.loaded.version} is)")
        return st.loaded

    def loaded(self) -> list[LoadedModel]:
        with self._lock:
            return [s.loaded for s in self._states.values() if s.loaded is not None]

    def index(self) -> list[dict]:
        """Every model the repository holds, loaded or not: name, version, state, reason."""
        with self._lock:
            states = dict(self._states)
        rows = []
        for name in sorted(set(self.names()) | set(states)):
            st = states.get(name)
            rows.append({"name": name, "version": st.version if st else "",
                         "state": st.state if st else "UNAVAILABLE", "reason": st.reason if st else "unloaded"})
        return rows

    def all_ready(self) -> bool:
        with self._lock:
            # strict readiness, as Triton's default: every model not unloaded on purpose is READY
            return all(s.state == "READY" or s.reason == "unloaded" for s in self._states.values())

    def close(self, drain: bool = True, timeout_s: float = 30.0) -> None:
        end = time.monotonic() + timeout_s
        for loaded in self.loaded():
            loaded.scheduler.close(drain=drain, timeout_s=max(0.0, end - time.monotonic()))
