#!/usr/bin/env python3
"""The CPU one `conductor submit --batch` process takes a batch (issue 39.3).

Usage: python3 benches/batch_cost.py BINS_A[,BINS_B...] [REPS]  (each a directory holding
`conductor` and `conductor-worker`, e.g. target/release). Every run submits 200 tasks
into a fresh root on /dev/shm that two workers serve, stopped (SIGSTOP) while the batch
runs: their locks are held, as live workers hold them, but they take no CPU, so what is
timed is the submitter alone. The builds take turns, run by run."""

import os, resource, signal, subprocess, sys, tempfile, time, shutil, statistics
def run(bins, reps, w):
    lst = os.path.join(w, "list")
    open(lst, "w").write("".join(f"task {i}\n" for i in range(200)))
    walls, cpus = [], []
    for r in range(reps):
        root = os.path.join(w, f"root{r}")
        os.makedirs(os.path.join(root, "workers"), mode=0o700)
        os.chmod(root, 0o700)
        ws = [subprocess.Popen([f"{bins}/conductor-worker", str(i), w, "--agent", "cat", "--root", root],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for i in range(2)]
        t0 = time.time()
        while not all(os.path.exists(f"{root}/workers/{i}/.worker.lock") for i in range(2)):
            assert time.time() - t0 < 30
            time.sleep(0.01)
        time.sleep(0.3)
        for p in ws: p.send_signal(signal.SIGSTOP)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        subprocess.run([f"{bins}/conductor", "submit", "--batch", "-f", lst, "--root", root],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        walls.append(time.perf_counter() - t)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        for p in ws:
            p.send_signal(signal.SIGCONT); p.terminate(); p.wait()
        shutil.rmtree(root)
    return walls, cpus
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 15
results = {}
with tempfile.TemporaryDirectory(dir="/dev/shm") as w:
    # Interleaved: each build's runs take turns, so the machine's mood hits both alike.
    names = sys.argv[1].split(",")
    for n in names: results[n] = ([], [])
    for _ in range(reps):
        for n in names:
            a, b = run(n, 1, w)
            results[n][0].extend(a); results[n][1].extend(b)
for n, (walls, cpus) in results.items():
    print(f"{n}: wall median {statistics.median(walls)*1000:.1f} ms (min {min(walls)*1000:.1f}), "
          f"cpu median {statistics.median(cpus)*1000:.1f} ms (min {min(cpus)*1000:.1f}) over {len(walls)}")
