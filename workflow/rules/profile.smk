# Nsight Systems profiles: one fixed, representative bench run under `nsys profile`, then
# `nsys stats` to CSV, the tidy tables and summary.md (python -m ring.nsys profile does all
# four). Profiling times the ring, so each job takes the `bench` resource.


rule nsys_profile_cpu:
    output:
        report="results/profiles/cpu/cpu.nsys-rep",
        stats=directory("results/profiles/cpu/stats"),
        tables=directory("results/profiles/cpu/tables"),
        summary="results/profiles/cpu/summary.md",
        csv="results/profiles/cpu/bench.csv",
        json="results/profiles/cpu/bench.json",
    log:
        "results/logs/profiles/cpu.log",
    conda:
        "../../envs/cpu.yaml"
    threads: config["nsys"]["profiles"]["cpu"]["nodes"]
    resources:
        bench=1,
    params:
        nsys=config["nsys"]["executable"],
        run=STUDY.profile_args("cpu"),
    shell:
        "python -m ring.nsys profile --name cpu --root results/profiles --nsys {params.nsys}"
        " -- python -m ring.bench {params.run} --out {output.csv} > {log} 2>&1"


rule nsys_profile_gpu:
    output:
        report="results/profiles/{nodes}gpu/{nodes}gpu.nsys-rep",
        stats=directory("results/profiles/{nodes}gpu/stats"),
        tables=directory("results/profiles/{nodes}gpu/tables"),
        summary="results/profiles/{nodes}gpu/summary.md",
        csv="results/profiles/{nodes}gpu/bench.csv",
        json="results/profiles/{nodes}gpu/bench.json",
    log:
        "results/logs/profiles/{nodes}gpu.log",
    wildcard_constraints:
        nodes="2|4",
    conda:
        "../../envs/gpu.yaml"
    resources:
        bench=1,
        gpu=lambda wildcards: STUDY.devices_for(nodes_of(wildcards)),
    params:
        nsys=config["nsys"]["executable"],
        run=lambda wildcards: STUDY.profile_args(f"{wildcards.nodes}gpu"),
        devices=lambda wildcards: STUDY.devices_for(nodes_of(wildcards)),
    shell:
        "python -m ring.nsys profile --name {wildcards.nodes}gpu --root results/profiles"
        " --gpus {params.devices} --nsys {params.nsys}"
        " -- python -m ring.bench {params.run} --out {output.csv} > {log} 2>&1"


# The profiler's own cost, measured in the same workflow: the CPU profile's bench run with and
# without `nsys profile`, alternating (python -m ring.nsys.overhead); the report shows it.


rule nsys_overhead_cpu:
    output:
        "results/profiles/cpu/overhead.json",
    log:
        "results/logs/profiles/cpu_overhead.log",
    conda:
        "../../envs/cpu.yaml"
    threads: config["nsys"]["profiles"]["cpu"]["nodes"]
    resources:
        bench=1,
    params:
        p=config["nsys"]["profiles"]["cpu"],
        repeats=3,
    shell:
        "python -m ring.nsys.overhead --size {params.p[bytes]} --nodes {params.p[nodes]}"
        " --iters {params.p[iters]} --warmup {params.p[warmup]} --repeats {params.repeats}"
        " --workdir results/profiles/cpu/overhead --json {output} > {log} 2>&1"
