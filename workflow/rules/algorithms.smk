# The algorithm sweeps (config key `algorithms`): every algorithm of the library on the ring
# backend of one kind, beside that kind's peers (cpu: numpy-direct, seed-cpp; mpi:
# MPI_Allreduce), in one harness run per N, so that their times compare within a run: the
# report's findings name our fastest of them against the fastest peer.  The ring-only
# sweeps of bench.smk stay as they are, over the whole size range and both syncs.
#
# Every job here times something: one unit of `bench` each, and a `benchmark:` file of the
# job's own wall time and peak memory (see bench.smk).

CPU_ALGORITHMS = algorithms_stem("cpu")
MPI_ALGORITHMS = algorithms_stem("mpi")
GPU_ALGORITHMS = algorithms_stem("gpu")


rule cpu_algorithms:
    output:
        csv=STUDY.path(f"{CPU_ALGORITHMS}.csv"),
        json=STUDY.path(f"{CPU_ALGORITHMS}.json"),
        samples=STUDY.path(f"{CPU_ALGORITHMS}.samples.csv"),
    log:
        STUDY.path(f"logs/{CPU_ALGORITHMS}.log"),
    benchmark:
        STUDY.path(f"logs/{CPU_ALGORITHMS}.benchmark.tsv")
    conda:
        "../../envs/cpu.yaml"
    threads: lambda wildcards: int(wildcards.nodes)
    resources:
        bench=1,
    params:
        backends=",".join(STUDY.cpu_backends_here()),
        sweep=STUDY.algorithm_args("cpu") if "algorithms" in config else "",
    shell:
        "python -m ring.bench --backend {params.backends} --nodes {wildcards.nodes}"
        " -d {wildcards.dtype} {params.sweep} --out {output.csv} > {log} 2>&1"


rule mpi_algorithms:
    output:
        csv=STUDY.path(f"{MPI_ALGORITHMS}.csv"),
        json=STUDY.path(f"{MPI_ALGORITHMS}.json"),
        samples=STUDY.path(f"{MPI_ALGORITHMS}.samples.csv"),
    log:
        STUDY.path(f"logs/{MPI_ALGORITHMS}.log"),
    benchmark:
        STUDY.path(f"logs/{MPI_ALGORITHMS}.benchmark.tsv")
    conda:
        "../../envs/mpi.yaml"
    threads: lambda wildcards: int(wildcards.nodes)
    resources:
        bench=1,
        tasks=lambda wildcards: int(wildcards.nodes),
        mpi=config["mpi"]["launcher"],
        nodes=lambda wildcards: STUDY.mpi_machines(nodes_of(wildcards)),
    params:
        backends=",".join(config["mpi"]["backends"]),
        sweep=STUDY.algorithm_args("mpi") if "algorithms" in config else "",
    shell:
        "{resources.mpi} -n {resources.tasks} python -m mpi4py -m ring.bench"
        " --backend {params.backends} --nodes {wildcards.nodes}"
        " -d {wildcards.dtype} {params.sweep} --out {output.csv} > {log} 2>&1"


rule gpu_algorithms:
    output:
        csv=STUDY.path(f"{GPU_ALGORITHMS}.csv"),
        json=STUDY.path(f"{GPU_ALGORITHMS}.json"),
    log:
        STUDY.path(f"logs/{GPU_ALGORITHMS}.log"),
    benchmark:
        STUDY.path(f"logs/{GPU_ALGORITHMS}.benchmark.tsv")
    conda:
        "../../envs/gpu.yaml"
    resources:
        bench=1,
        gpu=lambda wildcards: STUDY.devices_for(nodes_of(wildcards)),
    params:
        sweep=STUDY.algorithm_args("gpu") if "algorithms" in config else "",
        shared=lambda wildcards: STUDY.shared_flag(nodes_of(wildcards)),
    shell:
        "python -m ring.bench --backend gpu --nodes {wildcards.nodes}"
        " -d {wildcards.dtype} {params.sweep} {params.shared} --out {output.csv} > {log} 2>&1"
