"""A Triton-layout model repository: `REPO/NAME/config.pbtxt` and `REPO/NAME/VERSION/model.{onnx,fgx}`.

Configs are `inference.ModelConfig` messages in protobuf text format, parsed with the `model_config_pb2`
that tritonclient ships (the one copy of the protos in the process). A single model file is served as a
repository of one model with a generated config.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .errors import ModelConfigError

MODEL_FILES = ("model.onnx", "model.fgx")
# Triton's default for a model whose config leaves max_batch_size out and whose inputs batch
DEFAULT_MAX_BATCH_SIZE = 4


def pb():
    """tritonclient's generated model_config module (imported lazily: `import fusegraph` stays light)."""
    from tritonclient.grpc import model_config_pb2

    return model_config_pb2


@dataclass
class ModelEntry:
    """One model of the repository as found on disk: its config (maybe partial) and its versions' files."""

    name: str
    config: object               # model_config_pb2.ModelConfig
    versions: dict[int, Path]    # version -> model file
    explicit_config: bool        # False: generated, to be completed from the model itself

    @property
    def latest(self) -> tuple[int, Path]:
        v = max(self.versions)
        return v, self.versions[v]


def parse_config(text: str, where: str):
    from google.protobuf import text_format

    config = pb().ModelConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as e:
        raise ModelConfigError(f"{where}: not a valid ModelConfig in protobuf text format: {e}") from None
    return config


def read_entry(model_dir: Path) -> ModelEntry:
    """The repository entry of `model_dir`: its config.pbtxt (or a generated one) and its version folders."""
    name = model_dir.name
    config_path = model_dir / "config.pbtxt"
    if config_path.is_file():
        config = parse_config(config_path.read_text(), str(config_path))
        explicit = True
    else:
        config, explicit = pb().ModelConfig(), False
    if config.name and config.name != name:
        raise ModelConfigError(f"{config_path}: name {config.name!r} differs from its folder's name {name!r}")
    config.name = name
    files = (config.default_model_filename,) if config.default_model_filename else MODEL_FILES
    versions: dict[int, Path] = {}
    for sub in model_dir.iterdir():
        if sub.is_dir() and sub.name.isdigit():
            found = [sub / f for f in files if (sub / f).is_file()]
            if found:
                versions[int(sub.name)] = found[0]
    if not versions:
        raise ModelConfigError(f"{model_dir}: no version folder holds {' or '.join(files)} "
                               f"(expected {model_dir}/1/{files[0]})")
    return ModelEntry(name, config, versions, explicit)


def scan_repository(repo: Path) -> dict[str, Path]:
    """Model name -> its folder, for every folder of `repo` (entries that fail to read are reported at load)."""
    if not repo.is_dir():
        raise ModelConfigError(f"model repository {repo} is not a folder")
    return {d.name: d for d in sorted(repo.iterdir()) if d.is_dir() and not d.name.startswith(".")}


def single_file_entry(path: Path) -> ModelEntry:
    """A one-model repository for a bare model file: name from the file's stem, a generated config with
    dynamic batching (as Triton's auto-complete gives a batching ONNX model)."""
    if path.suffix not in (".onnx", ".fgx"):
        raise ModelConfigError(f"{path}: a model file must end in .onnx or .fgx")
    config = pb().ModelConfig(name=path.stem)
    config.dynamic_batching.SetInParent()
    return ModelEntry(path.stem, config, {1: path}, False)


def target_of(config, default: str) -> str:
    """The target a config asks for: a `parameters { key: "target" }` entry, else its instance_group
    kind (KIND_GPU -> gpu, KIND_CPU -> cpu), else `default`."""
    if "target" in config.parameters:
        return config.parameters["target"].string_value
    kinds = {g.kind for g in config.instance_group}
    K = pb().ModelInstanceGroup
    if K.KIND_GPU in kinds:
        if len(kinds) > 1:
            raise ModelConfigError(f"model {config.name!r}: instance groups of both CPU and GPU kinds")
        return "gpu"
    if K.KIND_CPU in kinds:
        return "cpu"
    return default


# `parameters { key: "precision" }`: the compile options each precision sets. With fp32 and fp16 the
# inputs and outputs keep the model's types; fp16_io makes its float32 ones TYPE_FP16 (clients send and
# receive half the bytes); the config's data types are the compiled program's either way
PRECISIONS = {"fp32": {}, "fp16": {"fp16": True}, "fp16_io": {"fp16": True, "fp16_io": True}}


def precision_options(config) -> dict:
    """The compile options of the config's `precision` parameter (fp32 where it names none)."""
    name = config.parameters["precision"].string_value if "precision" in config.parameters else "fp32"
    if name not in PRECISIONS:
        raise ModelConfigError(f"model {config.name!r}: precision {name!r}; expected one of {', '.join(PRECISIONS)}")
    return PRECISIONS[name]


def solo_threads(config) -> int:
    """The `solo_threads` parameter: the threads of a batch that runs while the model's other instances
    are idle and nothing else is queued (0, the default: every batch runs on its instance's share). On a
    CPU, N instances of cores/N threads serve concurrent requests best (no OpenMP team waits at a
    barrier for a core another instance holds), but leave cores idle when one request comes at a time;
    with solo_threads each instance also compiles its programs at that many threads, for those batches."""
    if "solo_threads" not in config.parameters:
        return 0
    text = config.parameters["solo_threads"].string_value
    if not text.isdigit():
        raise ModelConfigError(f"model {config.name!r}: parameter solo_threads {text!r}; expected a number of "
                               f"threads (0: off)")
    return int(text)


def instance_count(config) -> int:
    """Instances of the model; GPU groups count theirs on each listed GPU (an unlisted set counts once here:
    the server that places them knows how many GPUs there are, see `instance_devices`)."""
    if not config.instance_group:
        return 1
    return max(1, sum(max(g.count, 1) * max(len(g.gpus), 1) for g in config.instance_group))


def batch_buckets(max_batch_size: int, preferred: list[int]) -> list[int]:
    """The batch sizes programs are compiled for: powers of two and the preferred sizes up to the maximum,
    and the maximum itself. A batch runs on the smallest bucket that holds it, padded."""
    sizes = {max_batch_size, *[p for p in preferred if 0 < p <= max_batch_size]}
    b = 1
    while b < max_batch_size:
        sizes.add(b)
        b *= 2
    return sorted(sizes)


def instance_devices(config, target: str, gpu_count: Callable[[], int]) -> list[int | None]:
    """The device of each instance, in order: for a KIND_GPU group, `count` instances on each GPU of its
    `gpus` (all `gpu_count()` GPUs where it lists none, as Triton places them); None for CPU instances."""
    if not config.instance_group:
        return [None]
    K = pb().ModelInstanceGroup
    devices: list[int | None] = []
    for g in config.instance_group:
        count = max(g.count, 1)
        if g.kind == K.KIND_GPU or (g.kind == K.KIND_AUTO and target == "gpu"):
            gpus = list(g.gpus) or list(range(gpu_count()))
            if any(d < 0 for d in gpus):
                raise ModelConfigError(f"model {config.name!r}: instance group gpus {gpus} must be device indices >= 0")
            devices += [d for d in gpus for _ in range(count)] or [None] * count
        else:
            devices += [None] * count
    return devices
