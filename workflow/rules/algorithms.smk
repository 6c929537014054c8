# The algorithm sweeps (config key `algorithms`): every algorithm of the library on the ring
# backend of one kind, in one harness run per N, so that their times compare within a run.
# The ring-only sweeps of bench.smk stay as they are: the report's tables compare the plain
# ring with its peers from those; the per-algorithm figure reads these files.
#
# Every job here times something: one unit of `bench` each (see bench.smk).


rule cpu_algorithms:
    output:
        csv=f"{RESULTS}/cpu/algorithms_n{{nodes}}_{{dtype}}.csv",
        json=f"{RESULTS}/cpu/algorithms_n{{nodes}}_{{dtype}}.json",
        samples=f"{RESULTS}/cpu/algorithms_n{{nodes}}_{{dtype}}.samples.csv",
    log:
        f"{RESULTS}/logs/cpu/algorithms_n{{nodes}}_{{dtype}}.log",
    conda:
        "../../envs/cpu.yaml"
    threads: lambda wildcards: int(wildcards.nodes)
    resources:
        bench=1,
    params:
        sweep=STUDY.algorithm_args("cpu") if "algorithms" in config else "",
    shell:
        "python -m ring.bench --backend cpu --nodes {wildcards.nodes}"
        " -d {wildcards.dtype} {params.sweep} --out {output.csv} > {log} 2>&1"


rule mpi_algorithms:
    output:
        csv=f"{RESULTS}/mpi/algorithms_n{{nodes}}_{{dtype}}.csv",
        json=f"{RESULTS}/mpi/algorithms_n{{nodes}}_{{dtype}}.json",
        samples=f"{RESULTS}/mpi/algorithms_n{{nodes}}_{{dtype}}.samples.csv",
    log:
        f"{RESULTS}/logs/mpi/algorithms_n{{nodes}}_{{dtype}}.log",
    conda:
        "../../envs/mpi.yaml"
    threads: lambda wildcards: int(wildcards.nodes)
    resources:
        bench=1,
        tasks=lambda wildcards: int(wildcards.nodes),
        mpi=config["mpi"]["launcher"],
        nodes=lambda wildcards: STUDY.mpi_machines(nodes_of(wildcards)),
    params:
        sweep=STUDY.algorithm_args("mpi") if "algorithms" in config else "",
    shell:
        "{resources.mpi} -n {resources.tasks} python -m mpi4py -m ring.bench"
        " --backend mpi --nodes {wildcards.nodes}"
        " -d {wildcards.dtype} {params.sweep} --out {output.csv} > {log} 2>&1"


rule gpu_algorithms:
    output:
        csv=f"{RESULTS}/gpu/algorithms_n{{nodes}}_{{dtype}}.csv",
        json=f"{RESULTS}/gpu/algorithms_n{{nodes}}_{{dtype}}.json",
    log:
        f"{RESULTS}/logs/gpu/algorithms_n{{nodes}}_{{dtype}}.log",
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
