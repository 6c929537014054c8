# Nsight Systems profiles: one fixed, representative bench run under `nsys profile`, then
# `nsys stats` to CSV, the tidy tables and summary.md (python -m ring.nsys profile does all
# four). Profiling times the ring, so each job takes the `bench` resource.


rule nsys_profile_cpu:
    output:
        report=f"{RESULTS}/profiles/cpu/cpu.nsys-rep",
        stats=directory(f"{RESULTS}/profiles/cpu/stats"),
        tables=directory(f"{RESULTS}/profiles/cpu/tables"),
        summary=f"{RESULTS}/profiles/cpu/summary.md",
        csv=f"{RESULTS}/profiles/cpu/bench.csv",
        json=f"{RESULTS}/profiles/cpu/bench.json",
    log:
        f"{RESULTS}/logs/profiles/cpu.log",
    conda:
        "../../envs/cpu.yaml"
    threads: config["nsys"]["profiles"]["cpu"]["nodes"]
    resources:
        bench=1,
    params:
        nsys=config["nsys"]["executable"],
        run=STUDY.profile_args("cpu"),
        # results/profiles (or results/<name>/profiles): the folder above this profile's
        root=lambda wildcards, output: os.path.dirname(os.path.dirname(output.report)),
    shell:
        "python -m ring.nsys profile --name cpu --root {params.root} --nsys {params.nsys}"
        " -- python -m ring.bench {params.run} --out {output.csv} > {log} 2>&1"


rule nsys_profile_gpu:
    output:
        report=f"{RESULTS}/profiles/{{nodes}}gpu/{{nodes}}gpu.nsys-rep",
        stats=directory(f"{RESULTS}/profiles/{{nodes}}gpu/stats"),
        tables=directory(f"{RESULTS}/profiles/{{nodes}}gpu/tables"),
        summary=f"{RESULTS}/profiles/{{nodes}}gpu/summary.md",
        csv=f"{RESULTS}/profiles/{{nodes}}gpu/bench.csv",
        json=f"{RESULTS}/profiles/{{nodes}}gpu/bench.json",
    log:
        f"{RESULTS}/logs/profiles/{{nodes}}gpu.log",
    wildcard_constraints:
        # The GPU profiles' N, from their names (ring.study.config.PROFILE_GPUS).
        nodes="|".join(str(nodes) for nodes in PROFILE_GPUS.values()),
    conda:
        "../../envs/gpu.yaml"
    resources:
        bench=1,
        gpu=lambda wildcards: STUDY.devices_for(nodes_of(wildcards)),
    params:
        nsys=config["nsys"]["executable"],
        run=lambda wildcards: STUDY.profile_args(f"{wildcards.nodes}gpu"),
        devices=lambda wildcards: STUDY.devices_for(nodes_of(wildcards)),
        # results/profiles (or results/<name>/profiles): the folder above this profile's
        root=lambda wildcards, output: os.path.dirname(os.path.dirname(output.report)),
    shell:
        "python -m ring.nsys profile --name {wildcards.nodes}gpu --root {params.root}"
        " --gpus {params.devices} --nsys {params.nsys}"
        " -- python -m ring.bench {params.run} --out {output.csv} > {log} 2>&1"


# The profiler's own cost, measured in the same workflow: the CPU profile's bench run with and
# without `nsys profile`, alternating (python -m ring.nsys.overhead); the report shows it.


rule nsys_overhead_cpu:
    output:
        f"{RESULTS}/profiles/cpu/overhead.json",
    log:
        f"{RESULTS}/logs/profiles/cpu_overhead.log",
    conda:
        "../../envs/cpu.yaml"
    threads: config["nsys"]["profiles"]["cpu"]["nodes"]
    resources:
        bench=1,
    params:
        p=config["nsys"]["profiles"]["cpu"],
        repeats=config["nsys"]["overhead_repeats"],
        workdir=lambda wildcards, output: os.path.join(
            os.path.dirname(output[0]), "overhead"
        ),
    shell:
        "python -m ring.nsys.overhead --size {params.p[bytes]} --nodes {params.p[nodes]}"
        " --iters {params.p[iters]} --warmup {params.p[warmup]} --repeats {params.repeats}"
        " --workdir {params.workdir} --json {output} > {log} 2>&1"
