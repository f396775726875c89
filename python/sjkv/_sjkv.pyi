"""Type stubs of sjkv's C++ module (python/src/module.cpp)."""
from enum import Enum
from typing import Dict, List, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt

class FileError(Exception):
    """A damaged or wrong input file: 'PATH: defect', the tools' message."""

class Body(Enum):
    automatic: int
    scalar: int
    trellis: int

class Config:
    """An SJ-KVaRN codec configuration (docs/SPEC.md section 9.1)."""
    def __init__(self, text: str) -> None: ...
    @property
    def name(self) -> str: ...
    head_dim: int
    group: int
    bits_k: int
    bits_v: int
    sink: int
    tail: int
    tail_max: int
    iters: int
    @property
    def body(self) -> Body: ...
    @property
    def staging(self) -> str: ...
    def bits_occupied(self, B: int, N: int) -> float: ...
    def bits_allocated(self, n_ctx: int, n_ubatch: int = 512) -> float: ...

class Snapshot:
    """An SJ-KVaRN cache state of one sequence (docs/FORMAT.md section 3)."""
    @property
    def config(self) -> Config: ...
    N: int
    B: int
    B_prev: int
    draining: int
    kv_heads: int
    n_ubatch: int
    codebook_set: str
    @property
    def codebook_id(self) -> int: ...
    @property
    def layer_ids(self) -> List[int]: ...
    def bits_occupied(self) -> float: ...
    def decode(self, rotated: bool = False) -> Tuple[npt.NDArray[np.float16], npt.NDArray[np.float16]]: ...
    def write(self, path: str, zstd_level: int = 3) -> None: ...

Tiles = Union[npt.NDArray[np.float16], npt.NDArray[np.float32]]

def encode(k: Tiles, v: Tiles, config: str, n_ubatch: int = 512, codebook: str = "reference",
           layer_ids: Sequence[int] = ..., rotated: bool = False, threads: int = 0, model: str = "",
           source: str = "", token_ids: Sequence[int] = ...) -> Snapshot: ...
def read_snapshot(path: str) -> Snapshot: ...
def read_capture(path: str) -> Dict[str, object]: ...
def write_capture(path: str, k: Tiles, v: Tiles, layer_ids: Sequence[int] = ..., rotated: bool = False,
                  model: str = "", source: str = "", token_ids: Sequence[int] = ...) -> None: ...
def read_codebook(path: str) -> Tuple[int, npt.NDArray[np.float16], npt.NDArray[np.float16]]: ...
def write_codebook(path: str, k: npt.ArrayLike, v: npt.ArrayLike) -> None: ...
def table_sets() -> List[str]: ...
