# Figures and the report, built from the result files of this run; plus a record of what
# this machine could not measure, why, and the command that would.


rule not_measured:
    output:
        f"{RESULTS}/report/not_measured.json",
    log:
        f"{RESULTS}/logs/report/not_measured.log",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    params:
        entries=[entry.record() for entry in left_out(STUDY)],
    script:
        "../scripts/write_not_measured.py"


# The α–β–γ model fitted to each kind's screens (every algorithm, each way of running it),
# from which the report splits a finding's time into steps, bytes moved and bytes reduced.


rule model_fit:
    input:
        screens=lambda wildcards: STUDY.algorithm_files(wildcards.kind),
    output:
        STUDY.path("{kind}/model_fit.json"),
    log:
        STUDY.path("logs/{kind}/model_fit.log"),
    wildcard_constraints:
        kind="cpu|mpi",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    shell:
        "python -m ring.model fit --variants {input.screens} --out {output} > {log} 2>&1"


rule build_report:
    input:
        sweeps=STUDY.sweeps_here(),
        confirmations=STUDY.confirmations_here(),
        fits=STUDY.fits_here(),
        kernel_bw=STUDY.kernel_bw_here(),
        alternated=STUDY.compare_here(),
        tables=[f"{STUDY.profile_dir(name)}/tables" for name in STUDY.profiles_here()],
        summaries=[
            f"{STUDY.profile_dir(name)}/summary.md" for name in STUDY.profiles_here()
        ],
        overheads=[
            f"{STUDY.profile_dir(name)}/overhead.json"
            for name in STUDY.profiles_here()
            if name == "cpu"
        ],
        not_measured=f"{RESULTS}/report/not_measured.json",
        references=STUDY.references_here(),
        hosts=STUDY.hosts_here(),
    output:
        figures=report(
            directory(f"{RESULTS}/figures"),
            patterns=["{figure}.png"],
            caption="../report/figure.rst",
            category="Figures",
        ),
        html=report(
            f"{RESULTS}/report/index.html",
            caption="../report/index.rst",
            category="Report",
        ),
        markdown=f"{RESULTS}/report/report.md",
        appendix=f"{RESULTS}/report/appendix.md",
        appendix_html=f"{RESULTS}/report/appendix.html",
    log:
        f"{RESULTS}/logs/report/report.log",
    conda:
        "../../envs/analysis.yaml"
    params:
        inputs=report_args,
        out=lambda wildcards, output: os.path.dirname(output.html),
        captions=lambda wildcards: figure_captions(),
    shell:
        "python -m ring.report {params.inputs} --figures {output.figures}"
        " --out {params.out} > {log} 2>&1"
