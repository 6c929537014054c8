# MPI across emulated hosts (scripts/hosts.sh, as root): one harness run per link rate and
# ranks per host, each bringing the hosts up at its rate (idempotent), launching through
# hosts.sh's mpirun (an rsh agent that enters each host's namespaces) and taking the hosts
# down again, whether the run succeeded or not. The run's JSON gets its conditions (rate,
# hosts, ranks per host, oversubscribed); the model's two levels are fitted to all of them.
#
# The ranks yield their core while they wait (mpi_yield_when_idle): every host shares this
# machine's cores, and ranks that spin leave the kernel's network work (ksoftirqd, which
# carries each message across the veth pairs) to the next scheduler tick
# (docs/notes/emulated-links.md); a real host's NIC does not wait on its ranks.

from ring.study.hosts import hosts_model_stem, hosts_stem

HOSTS_RUN = hosts_stem()


rule hosts_run:
    output:
        csv=STUDY.path(f"{HOSTS_RUN}.csv"),
        json=STUDY.path(f"{HOSTS_RUN}.json"),
        samples=STUDY.path(f"{HOSTS_RUN}.samples.csv"),
    log:
        STUDY.path(f"logs/{HOSTS_RUN}.log"),
    benchmark:
        STUDY.path(f"logs/{HOSTS_RUN}.benchmark.tsv")
    wildcard_constraints:
        rate=r"[0-9.]+[kmg]bit",
        per_host=r"\d+",
    localrule: True
    conda:
        "../../envs/mpi.yaml"
    threads: lambda wildcards: config["hosts"]["count"] * int(wildcards.per_host)
    resources:
        bench=1,
    params:
        hosts=lambda wildcards: config["hosts"]["count"],
        ranks=lambda wildcards: config["hosts"]["count"] * int(wildcards.per_host),
        set=lambda wildcards: config["hosts"]["set"],
        flags=lambda wildcards: STUDY.hosts_args(),
    shell:
        "bash scripts/hosts.sh --name {params.set} --rate {wildcards.rate}"
        " --slots {wildcards.per_host} up {params.hosts} > {log} 2>&1"
        " && bash scripts/hosts.sh --name {params.set} mpirun --mca mpi_yield_when_idle 1"
        " --map-by ppr:{wildcards.per_host}:node -n {params.ranks}"
        ' "$(command -v python)" -m mpi4py -m ring.bench {params.flags}'
        " --nodes {params.ranks} -d {wildcards.dtype} --out {output.csv} >> {log} 2>&1"
        " && python -m ring.study.conditions {output.json} --set {params.set}"
        " --rate {wildcards.rate} --hosts {params.hosts} --per-host {wildcards.per_host}"
        " >> {log} 2>&1; status=$?;"
        " bash scripts/hosts.sh --name {params.set} down >> {log} 2>&1; exit $status"


# The inter-host link (alpha, beta) and the shared-memory level fitted per link rate, and
# the prediction of every priced row beside its measured time (what the report shows).


rule hosts_model:
    input:
        runs=lambda wildcards: STUDY.hosts_files()[:-1],
    output:
        json=STUDY.path(f"{hosts_model_stem()}.json"),
        csv=STUDY.path(f"{hosts_model_stem()}.csv"),
    log:
        STUDY.path(f"logs/{hosts_model_stem()}.log"),
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    shell:
        "python -m ring.model hosts {input.runs} --out {output.json} > {log} 2>&1"
