# The runs: one harness run per node count (GPU: per backend, or the algorithms, and N), writing
# FILE.csv (one row per series and size), FILE.json (environment, ceilings at the start and
# the end, command) and FILE.samples.csv (every timed call) side by side.
#
# Every job here times something, so each takes one unit of the `bench` resource, which
# profiles/default limits to 1: benchmark jobs never share the machine with each other,
# whatever --cores says.
#
# Snakemake's `benchmark:` file of each job (logs/FILE.benchmark.tsv) records what the harness
# does not: the job's wall time including start-up, its peak memory (max_rss, what a cluster's
# mem_mb must cover) and CPU time. The measurements themselves are in FILE.csv.
#
# Each rule's files share a stem (FILE.csv, FILE.json, FILE.samples.csv, logs/FILE.log) with
# Snakemake's wildcards in it; ring.study spells the stems, for these rules and its file lists.

COMPARE = compare_stem()
# A GPU run: a backend's sweep (`run` names the backend: gpu, nccl) or `algorithms` (every
# algorithm of the GPU ring in one run per N).
GPU_RUN = gpu_stem("{run}")
KERNEL_BW = kernel_bw_stem()
# A run of the cpu or mpi kind: `sweep` (the plain ring and the peers over the whole size
# range, in and out of place), `algorithms` (every algorithm beside the peers: the screen
# the confirmations pick from) or, cpu only, `original` (the original study's own size).
CPU_RUN = run_stem("cpu")
MPI_RUN = run_stem("mpi")


# CPU and MPI: our ring and its peers in one invocation, measured size by size in turn
# (ratios between them then come from one run, under the same conditions).


rule cpu_run:
    output:
        csv=STUDY.path(f"{CPU_RUN}.csv"),
        json=STUDY.path(f"{CPU_RUN}.json"),
        samples=STUDY.path(f"{CPU_RUN}.samples.csv"),
    log:
        STUDY.path(f"logs/{CPU_RUN}.log"),
    benchmark:
        STUDY.path(f"logs/{CPU_RUN}.benchmark.tsv")
    wildcard_constraints:
        run="sweep|algorithms|original",
    conda:
        "../../envs/cpu.yaml"
    threads: lambda wildcards: int(wildcards.nodes)
    resources:
        bench=1,
    params:
        flags=lambda wildcards: STUDY.run_args("cpu", wildcards.run),
    shell:
        "python -m ring.bench {params.flags} --nodes {wildcards.nodes}"
        " -d {wildcards.dtype} --out {output.csv} > {log} 2>&1"


rule mpi_run:
    output:
        csv=STUDY.path(f"{MPI_RUN}.csv"),
        json=STUDY.path(f"{MPI_RUN}.json"),
        samples=STUDY.path(f"{MPI_RUN}.samples.csv"),
    log:
        STUDY.path(f"logs/{MPI_RUN}.log"),
    benchmark:
        STUDY.path(f"logs/{MPI_RUN}.benchmark.tsv")
    wildcard_constraints:
        run="sweep|algorithms",
    conda:
        "../../envs/mpi.yaml"
    threads: lambda wildcards: int(wildcards.nodes)
    resources:
        bench=1,
        # One rank per node: `mpi` is the launcher (profiles/slurm sets srun).
        tasks=lambda wildcards: int(wildcards.nodes),
        mpi=config["mpi"]["launcher"],
        # SLURM machines: as many as ranks (one each) when the config asks for it.
        nodes=lambda wildcards: STUDY.mpi_machines(nodes_of(wildcards)),
    params:
        flags=lambda wildcards: STUDY.run_args("mpi", wildcards.run),
    shell:
        # Under mpi4py's runner an exception on one rank aborts the job, not just that rank.
        "{resources.mpi} -n {resources.tasks} python -m mpi4py -m ring.bench"
        " {params.flags} --nodes {wildcards.nodes}"
        " -d {wildcards.dtype} --out {output.csv} > {log} 2>&1"


# The threaded ring and MPI_Allreduce need separate launches: alternated, several rounds.


rule compare_bench:
    output:
        csv=STUDY.path(f"{COMPARE}.csv"),
        json=STUDY.path(f"{COMPARE}.json"),
    log:
        STUDY.path(f"logs/{COMPARE}.log"),
    benchmark:
        STUDY.path(f"logs/{COMPARE}.benchmark.tsv")
    conda:
        "../../envs/mpi.yaml"
    threads: lambda wildcards: int(wildcards.nodes)
    resources:
        bench=1,
        # Its MPI launches start one rank per node: the job asks for them as mpi_run does.
        tasks=lambda wildcards: int(wildcards.nodes),
        mpi=config["mpi"]["launcher"],
        nodes=lambda wildcards: STUDY.mpi_machines(nodes_of(wildcards)),
    params:
        rounds=lambda wildcards: config["compare"]["rounds"],
        sweep=STUDY.sweep_args("compare"),
    shell:
        "python -m ring.bench alternate --nodes {wildcards.nodes} --rounds {params.rounds}"
        " --launcher {resources.mpi:q} --out {output.csv}"
        " -- -d {wildcards.dtype} {params.sweep} > {log} 2>&1"


rule gpu_run:
    output:
        csv=STUDY.path(f"{GPU_RUN}.csv"),
        json=STUDY.path(f"{GPU_RUN}.json"),
    log:
        STUDY.path(f"logs/{GPU_RUN}.log"),
    benchmark:
        STUDY.path(f"logs/{GPU_RUN}.benchmark.tsv")
    wildcard_constraints:
        run="|".join([*config["gpu"]["backends"], "algorithms"]),
    conda:
        "../../envs/gpu.yaml"
    resources:
        bench=1,
        gpu=lambda wildcards: STUDY.devices_for(nodes_of(wildcards)),
    params:
        flags=lambda wildcards: STUDY.gpu_run_args(wildcards.run),
        shared=lambda wildcards: STUDY.shared_flag(nodes_of(wildcards)),
    shell:
        "python -m ring.bench {params.flags} --nodes {wildcards.nodes}"
        " -d {wildcards.dtype} {params.shared} --out {output.csv} > {log} 2>&1"


rule kernel_bw_sweep:
    output:
        csv=STUDY.path(f"{KERNEL_BW}.csv"),
        json=STUDY.path(f"{KERNEL_BW}.json"),
    log:
        STUDY.path(f"logs/{KERNEL_BW}.log"),
    benchmark:
        STUDY.path(f"logs/{KERNEL_BW}.benchmark.tsv")
    conda:
        "../../envs/gpu.yaml"
    resources:
        bench=1,
        gpu=1,
    params:
        sweep=STUDY.sweep_args("kernel_bw"),
    shell:
        "python -m ring.bench kernel-bw -d {wildcards.dtype} {params.sweep}"
        " --out {output.csv} > {log} 2>&1"
