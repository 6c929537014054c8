# The algorithm sweeps (config key `algorithms`): every algorithm of the library on the ring
# backend of one kind, in one harness run per N.  The cpu and mpi ones, beside their kind's
# peers, are bench.smk's `algorithms` runs (the screens that confirm.smk confirms); the GPU's
# is here.
#
# Every job here times something: one unit of `bench` each, and a `benchmark:` file of the
# job's own wall time and peak memory (see bench.smk).

GPU_ALGORITHMS = algorithms_stem("gpu")


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
