# The ring-allreduce study: `snakemake --cores 8 all` reproduces every result this machine
# can produce; named targets run one stage. Rules live in workflow/rules/, one file per stage.

from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version

from ring.study.config import ConfigError, check_config

min_version("8.30")


configfile: "config/config.yaml"


# The schema and the bounds it cannot state, with one line per problem (Snakemake's own
# validate prints the whole schema).
try:
    check_config(config, "workflow/schemas/config.schema.yaml")
except ConfigError as error:
    raise WorkflowError(str(error)) from None


# `bench` (profiles/default: one unit) keeps timed jobs apart on one machine; jobs submitted
# to a cluster each count against their own machine's unit, not a workflow-wide one.
resource_scopes:
    bench="local",


include: "workflow/rules/common.smk"
include: "workflow/rules/bench.smk"
include: "workflow/rules/confirm.smk"
include: "workflow/rules/profile.smk"
include: "workflow/rules/hosts.smk"
include: "workflow/rules/report.smk"


# Where the run's report is, on the last line of a successful run (it is also in the log).
onsuccess:
    report_page = f"{RESULTS}/report/index.html"
    if os.path.exists(report_page):
        print(
            f"report: {report_page} (Markdown: {RESULTS}/report/report.md); "
            "Snakemake's own, with the figures and provenance: snakemake --report report.zip"
        )


rule all:
    default_target: True
    input:
        all_inputs,


rule cpu:
    input:
        cpu_target,


rule mpi:
    input:
        mpi_target,


rule gpu:
    input:
        gpu_target,


# MPI across emulated hosts (needs root): config `hosts`, docs/cluster.md.
rule hosts:
    input:
        hosts_target,


rule kernel_bw:
    input:
        kernel_bw_target,


rule nsys_cpu:
    input:
        nsys_target("cpu"),


rule nsys_2gpu:
    input:
        nsys_target("2gpu"),


rule nsys_4gpu:
    input:
        nsys_target("4gpu"),


rule report:
    input:
        f"{RESULTS}/report/index.html",
        f"{RESULTS}/report/report.md",
