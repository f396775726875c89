"""Shared by the benchmarks (scripts/bench-hybrid-long, bench-score, bench-replay-long,
bench-quant-speed): timed child processes with their peak memory, resumable phases, llama.cpp's
prefill and decode timed the same way everywhere, and the history every Debian system can
rebuild (the licence texts of /usr/share/common-licenses, repeated to a token count)."""
import hashlib
import json
import math
import os
import pty
import re
import select
import shlex
import subprocess
import sys
import textwrap
import time

LICENCES = "/usr/share/common-licenses"
GIB = float(1 << 30)

T0 = time.monotonic()


def say(msg):
    print(f"[{time.monotonic() - T0:8.1f} s] {msg}", file=sys.stderr, flush=True)


def fail(msg):
    print(f"{os.path.basename(sys.argv[0])}: {msg}", file=sys.stderr)
    sys.exit(1)


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


# Run by the llama-cpp-python interpreter (argv: model, ids file, threads, ubatch, decode): load,
# prefill the ids in ubatches (f16 cache, flash attention, logits of the last position only),
# then greedy decode; one JSON line on stdout with the seconds of each.
LLAMA_RUN = textwrap.dedent("""
    import json, sys, time, numpy as np
    import llama_cpp
    from llama_cpp import Llama
    model, idf, threads, ubatch, decode = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    ids = [int(x) for x in open(idf).read().split(",")]
    t0 = time.perf_counter()
    llm = Llama(model_path=model, n_ctx=len(ids) + decode + 8, n_batch=ubatch, n_ubatch=ubatch, n_threads=threads,
                n_threads_batch=threads, type_k=1, type_v=1, flash_attn=True, logits_all=False, verbose=False)
    tl = time.perf_counter() - t0
    print("prefill", flush=True, file=sys.stderr)
    t0 = time.perf_counter()
    llm.eval(ids)
    tp = time.perf_counter() - t0
    def last():
        return int(np.argmax(np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(llm.n_vocab(),))))
    tok = last()
    t0 = time.perf_counter()
    for i in range(decode):
        llm.eval([tok])
        tok = last()
    td = time.perf_counter() - t0
    print(json.dumps(dict(version=llama_cpp.__version__, load_s=tl, prefill_s=tp, decode_s=td)))
""")


def llama_cmd(python, model, ids_file, threads, ubatch, decode):
    """The command that times llama.cpp on model (LLAMA_RUN); its last stdout line is the JSON."""
    return [python, "-c", LLAMA_RUN, model, ids_file, str(threads), str(ubatch), str(decode)]


def done_phase(path, settings):
    """The result of a phase already run with these settings, or None (a different one is an error:
    DIR holds another run)."""
    if not os.path.exists(path):
        return None
    r = json.load(open(path, encoding="utf-8"))
    if r.get("settings") != settings:
        fail(f"{path} was written with other settings ({r.get('settings')}, now {settings}): use another --out")
    say(f"{os.path.basename(path)} exists: phase skipped")
    return r


def run_measured(cmd, log, what, shown=None):
    """Runs cmd with its stderr on a pseudo-terminal (sjkv's progress bar shows only there) and
    stdout in log. Returns wall seconds, peak RSS bytes, the times (from the start) of the first
    and last progress update, and the text it wrote on stderr."""
    say(f"{what}: {shown or ' '.join(shlex.quote(c) for c in cmd)}")
    master, slave = pty.openpty()
    t0 = time.monotonic()
    with open(log, "wb") as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=slave, stdin=subprocess.DEVNULL)
    os.close(slave)
    buf, first, last, beat = b"", None, None, t0
    status = rusage = None
    eof = False
    bar = re.compile(rb"\] +\d+% (\d+)/(\d+)")
    while True:
        r = []
        if not eof:
            r, _, _ = select.select([master], [], [], 1.0)
        else:
            time.sleep(0.2)
        if r:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every holder of the terminal's other end has closed it
                chunk = b""
            if not chunk:
                eof = True
            else:
                now = time.monotonic() - t0
                if bar.search(chunk):
                    first = now if first is None else first
                    last = now
                buf += chunk
        if status is None:
            pid, st, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                status, rusage = st, ru
        if status is not None and (eof or not r):
            break
        if time.monotonic() - beat >= 60:
            beat = time.monotonic()
            prog = bar.findall(buf[-200:])
            say(f"{what}: running, {prog[-1][0].decode()}/{prog[-1][1].decode()} positions" if prog
                else f"{what}: running (prompt)")
    os.close(master)
    wall = time.monotonic() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    text = buf.decode("utf-8", "replace").replace("\r\n", "\n")
    with open(log, "ab") as out:
        out.write(b"\n--- stderr ---\n" + text.encode())
    if p.returncode != 0:
        lines = [l for l in re.split(r"[\r\n]", text) if l.strip()]
        fail(f"{what} failed (exit {p.returncode}): {lines[-1] if lines else ''} (log {log})")
    say(f"{what}: done in {wall:.1f} s, peak RSS {rusage.ru_maxrss / (1 << 20):.2f} GiB")
    return wall, rusage.ru_maxrss * 1024, first, last, text


# ---- history ----------------------------------------------------------------------------------
def licence_text():
    parts, named = [], []
    for name in sorted(os.listdir(LICENCES)):
        path = os.path.join(LICENCES, name)
        if os.path.isfile(path) and not os.path.islink(path):
            data = open(path, "rb").read()
            digest = hashlib.sha256(data).hexdigest()
            print(f"history: {path} sha256 {digest}", file=sys.stderr)
            named.append([name, digest])
            parts.append(data.decode("utf-8", "replace"))
    return "\n\n".join(parts), named


def tokenize(tok, model, path, bos=True):
    cmd = [tok, model] + (["--bos"] if bos else []) + [path]
    return [int(x) for x in subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.split()]


def make_history(a, tok, settings):
    """prompt.txt whose tokenization is exactly the first --tokens ids of the repeated licence text
    (cut at a token's first byte; a cut inside a word that tokenizes differently moves back a token)."""
    path = os.path.join(a.out, "history.json")
    r = done_phase(path, settings)
    if r:
        return r
    text, named = licence_text()
    once = os.path.join(a.out, "licences.txt")
    open(once, "w", encoding="utf-8").write(text)
    per_copy = len(tokenize(tok, a.model, once, bos=False))
    copies = max(1, math.ceil(a.tokens / max(1, per_copy)) + 1)
    data = "\n\n".join([text] * copies).encode("utf-8")
    full = os.path.join(a.out, "licences-repeated.txt")
    open(full, "wb").write(data)
    plain = tokenize(tok, a.model, full, bos=False)
    n_bos = len(tokenize(tok, a.model, once)) - per_copy  # tokens the model adds in front (BOS)
    want = a.tokens - n_bos
    if len(plain) < want:
        fail(f"{copies} copies of the licence texts give {len(plain)} tokens, fewer than {want}")
    vocab = subprocess.run([tok, a.model, "--vocab"], check=True, capture_output=True, text=True).stdout
    nbytes = {}
    for line in vocab.splitlines():
        f = line.split("\t")
        nbytes[int(f[0])] = len(f[1]) // 2
    offsets = [0]
    for t in plain[:want]:
        offsets.append(offsets[-1] + nbytes[t])
    prompt = os.path.join(a.out, "prompt.txt")
    for n in range(want, max(0, want - 64), -1):
        open(prompt, "wb").write(data[: offsets[n]])
        ids = tokenize(tok, a.model, prompt)
        if ids[n_bos:] == plain[:n]:
            break
    else:
        fail("no cut of the history near --tokens tokenizes as a prefix of the whole")
    os.unlink(full)
    os.unlink(once)
    open(os.path.join(a.out, "ids.txt"), "w").write(",".join(map(str, ids)))
    copy_bytes = len(text.encode("utf-8")) + 2
    r = dict(settings=settings, licences=named, copies=math.ceil(offsets[n] / copy_bytes), tokens_per_copy=per_copy,
             tokens=len(ids), bytes=offsets[n], prompt_sha256=sha256(prompt))
    write_json(path, r)
    say(f"history: {len(ids)} tokens ({offsets[n]} bytes: {r['copies']} cop{'y' if r['copies'] == 1 else 'ies'}, the last cut, of {len(named)} "
        f"licence texts)")
    return r
