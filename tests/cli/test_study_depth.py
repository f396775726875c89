"""scripts/study_depth.py on hand-made arm folders (no model): the depth bins and their means,
the needle rows by distance with the gold and reference top-1 shares, the same bytes on a second
run, the bootstrap intervals around the means, and a refusal when the answers do not match
study/needles.json. Usage: python3 test_study_depth.py SOURCE_DIR SCRATCH"""
import json
import math
import os
import shutil
import sys

src, scratch = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(src, "scripts"))
import study_depth  # noqa: E402

shutil.rmtree(scratch, ignore_errors=True)
os.makedirs(scratch)


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def write_atomic(path, data):
    with open(path + ".tmp", "wb") as f:
        f.write(data)
    os.replace(path + ".tmp", path)


# Two agent sessions: positions 500-1499 (bins 0-1K and 1K-2K) and 4000-4099 (2K-5K); arm "a" has
# KL 0.001 below position 1000 and 0.003 from there, arm "b" twice that.
for h, positions in (("s1", range(500, 1500)), ("s2", range(4000, 4100))):
    for arm, scale in (("a", 1.0), ("b", 2.0)):
        rows = ["trajectory,position,arm,kl,same_top,bits_occupied,bits_allocated"]
        for p in positions:
            kl = scale * (0.001 if p < 1000 else 0.003)
            rows.append(f"{h}.h5,{p},{arm},{kl},{int(p % 10 != 0)},4,5")
        write(f"{scratch}/{h}/{arm}/positions.csv", "\n".join(rows) + "\n")
# Two needle documents, three needles each (distances 3000, 2000, 1000), two answer tokens each.
meta = {"haystacks": [{"history": d, "needles": [{"distance_target": x} for x in (3000, 2000, 1000)]} for d in ("n1", "n2")]}
write(f"{scratch}/needles.json", json.dumps(meta))
for d in ("n1", "n2"):
    for arm, scale in (("a", 1.0), ("b", 2.0)):
        rows = ["trajectory,segment,position,arm,kl,gold_top,ref_gold_top"]
        for k, seg in enumerate((3, 5, 7)):  # segment indices in the trajectory, in stream order
            for t in range(2):
                kl = scale * 0.01 * (3 - k)  # the farthest needle costs most
                gold = int(not (arm == "b" and k == 0))
                rows.append(f"{d}.h5,{seg},{1000 * k + t},{arm},{kl},{gold},1")
        write(f"{scratch}/{d}/{arm}/answers.csv", "\n".join(rows) + "\n")
        write(f"{scratch}/{d}/{arm}/positions.csv", "trajectory,position,arm,kl,same_top,bits_occupied,bits_allocated\n")

histories = [{"name": "s1", "sets": ["ag"], "kind": "agentic", "transcript": 1},
             {"name": "s2", "sets": ["ag"], "kind": "agentic", "transcript": 1},
             {"name": "n1", "sets": ["nd"], "kind": "needles", "transcript": 1},
             {"name": "n2", "sets": ["nd"], "kind": "needles", "transcript": 1}]


def folder_of(h, arm):
    return f"{scratch}/{h['name']}/{arm}"


out = os.path.join(scratch, "out")
os.makedirs(out)
paths = study_depth.write(out, ["ag", "nd"], histories, lambda s: ["a", "b"], folder_of, f"{scratch}/needles.json",
                          write_atomic)
assert sorted(os.path.basename(p) for p in paths) == ["depth.csv", "needles.csv"], paths
first = {p: open(p, "rb").read() for p in paths}
study_depth.write(out, ["ag", "nd"], histories, lambda s: ["a", "b"], folder_of, f"{scratch}/needles.json", write_atomic)
assert all(open(p, "rb").read() == b for p, b in first.items()), "a second run gave other bytes"

import csv  # noqa: E402
depth = list(csv.DictReader(open(f"{out}/depth.csv")))
cell = {(r["arm"], r["from"]): r for r in depth}
assert {r["set"] for r in depth} == {"ag"}, depth
assert sorted({r["from"] for r in depth}, key=int) == ["0", "1000", "2000"], depth
assert cell[("a", "0")]["positions"] == "500" and cell[("a", "1000")]["positions"] == "500"
assert cell[("a", "2000")]["positions"] == "100" and cell[("a", "2000")]["histories"] == "1"
assert math.isclose(float(cell[("a", "0")]["mean_kl"]), 0.001) and math.isclose(float(cell[("b", "1000")]["mean_kl"]), 0.006)
for r in depth:  # constant KL in a bin: the interval is the point
    assert math.isclose(float(r["ci_low"]), float(r["mean_kl"])) and math.isclose(float(r["ci_high"]), float(r["mean_kl"])), r
assert math.isclose(float(cell[("a", "0")]["same_top"]), 0.9)

nd = list(csv.DictReader(open(f"{out}/needles.csv")))
cell = {(r["arm"], r["distance"]): r for r in nd}
assert [r["distance"] for r in nd if r["arm"] == "a"] == ["1000", "2000", "3000", "0"], nd
assert math.isclose(float(cell[("a", "3000")]["mean_kl"]), 0.03) and math.isclose(float(cell[("a", "1000")]["mean_kl"]), 0.01)
assert math.isclose(float(cell[("a", "0")]["mean_kl"]), 0.02) and cell[("a", "0")]["positions"] == "12"
assert cell[("a", "0")]["documents"] == "2" and cell[("a", "0")]["answers"] == "6"
lo, hi = float(cell[("a", "0")]["ci_low"]), float(cell[("a", "0")]["ci_high"])
assert 0.01 <= lo < 0.02 < hi <= 0.03, (lo, hi)  # needles differ: the interval is wide, inside their range
assert math.isclose(float(cell[("b", "3000")]["gold_top"]), 0.0) and math.isclose(float(cell[("b", "0")]["gold_top"]), 2 / 3)
assert all(math.isclose(float(r["ref_gold_top"]), 1.0) for r in nd)

# A document whose answers are not its needles is refused, naming it.
write(f"{scratch}/needles.json", json.dumps({"haystacks": [{"history": "n1", "needles": [{"distance_target": 1}]},
                                                           meta["haystacks"][1]]}))
try:
    study_depth.write(out, ["nd"], histories, lambda s: ["a"], folder_of, f"{scratch}/needles.json", write_atomic)
    raise SystemExit("FAIL: answers that are not the needles were taken")
except ValueError as e:
    assert "n1: 3 answer segments scored, study/needles.json has 1 for it" in str(e), e
# A row that is not a number is refused naming the file and the line.
write(f"{scratch}/needles.json", json.dumps(meta))
bad = f"{scratch}/n2/a/answers.csv"
write(bad, open(bad).read().replace(",0.03,", ",x,", 1))
try:
    study_depth.write(out, ["nd"], histories, lambda s: ["a"], folder_of, f"{scratch}/needles.json", write_atomic)
    raise SystemExit("FAIL: a damaged answers.csv was taken")
except ValueError as e:
    assert str(e).startswith(f"{bad}: line 2: "), e
print("study_depth: ok")
