# The screen's picks confirmed (config key `confirm`): each cpu and mpi algorithm run is a
# screen; `finalists` writes the series it picked at each size (and their near ties), and
# the confirmation runs those and the kind's peers again in `confirm: launches` separate
# launches, alternating the series' order (python -m ring.bench launches).  The report's
# findings come from these launch sets alone: a series is judged on launches it was not
# picked on, and a ratio's interval is the spread between launches.

CPU_CONFIRM = confirm_stem("cpu")
MPI_CONFIRM = confirm_stem("mpi")


rule finalists:
    input:
        screen=STUDY.path(f"{algorithms_stem('{kind}')}.csv"),
    output:
        STUDY.path(f"{finalists_stem('{kind}')}.json"),
    log:
        STUDY.path(f"logs/{finalists_stem('{kind}')}.log"),
    wildcard_constraints:
        kind="cpu|mpi",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    params:
        within=lambda wildcards: config["confirm"].get("within", 0.05),
        most=lambda wildcards: config["confirm"].get("most", 4),
    shell:
        "python -m ring.bench finalists {input.screen} --within {params.within}"
        " --most {params.most} --out {output} > {log} 2>&1"


rule cpu_confirm:
    input:
        finalists=STUDY.path(f"{finalists_stem('cpu')}.json"),
    output:
        csv=STUDY.path(f"{CPU_CONFIRM}.csv"),
        json=STUDY.path(f"{CPU_CONFIRM}.json"),
        samples=STUDY.path(f"{CPU_CONFIRM}.samples.csv"),
    log:
        STUDY.path(f"logs/{CPU_CONFIRM}.log"),
    benchmark:
        STUDY.path(f"logs/{CPU_CONFIRM}.benchmark.tsv")
    conda:
        "../../envs/cpu.yaml"
    threads: lambda wildcards: int(wildcards.nodes)
    resources:
        bench=1,
    params:
        launches=lambda wildcards: config["confirm"]["launches"],
        flags=lambda wildcards: STUDY.confirm_args("cpu"),
        backends=",".join(STUDY.cpu_backends_here()),
    shell:
        "python -m ring.bench launches --launches {params.launches}"
        " --finalists {input.finalists} --out {output.csv}"
        " -- --backend {params.backends} --nodes {wildcards.nodes} -d {wildcards.dtype}"
        " {params.flags} > {log} 2>&1"


rule mpi_confirm:
    input:
        finalists=STUDY.path(f"{finalists_stem('mpi')}.json"),
    output:
        csv=STUDY.path(f"{MPI_CONFIRM}.csv"),
        json=STUDY.path(f"{MPI_CONFIRM}.json"),
        samples=STUDY.path(f"{MPI_CONFIRM}.samples.csv"),
    log:
        STUDY.path(f"logs/{MPI_CONFIRM}.log"),
    benchmark:
        STUDY.path(f"logs/{MPI_CONFIRM}.benchmark.tsv")
    conda:
        "../../envs/mpi.yaml"
    threads: lambda wildcards: int(wildcards.nodes)
    resources:
        bench=1,
        # Each launch starts one rank per node: the job asks for them as mpi_run does.
        tasks=lambda wildcards: int(wildcards.nodes),
        mpi=config["mpi"]["launcher"],
        nodes=lambda wildcards: STUDY.mpi_machines(nodes_of(wildcards)),
    params:
        launches=lambda wildcards: config["confirm"]["launches"],
        flags=lambda wildcards: STUDY.confirm_args("mpi"),
        backends=",".join(config["mpi"]["backends"]),
    shell:
        "python -m ring.bench launches --launches {params.launches}"
        " --launcher '{resources.mpi} -n {resources.tasks}'"
        " --finalists {input.finalists} --out {output.csv}"
        " -- --backend {params.backends} --nodes {wildcards.nodes} -d {wildcards.dtype}"
        " {params.flags} > {log} 2>&1"
