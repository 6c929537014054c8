# Figures and the report, built from the result files of this run; plus a record of what
# this machine could not measure, why, and the command that would.


rule not_measured:
    output:
        "results/report/not_measured.json",
    log:
        "results/logs/report/not_measured.log",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    params:
        entries=not_measured(),
    script:
        "../scripts/write_not_measured.py"


rule build_report:
    input:
        sweeps=sweeps_here(),
        kernel_bw=kernel_bw_here(),
        alternated=compare_here(),
        tables=[f"results/profiles/{name}/tables" for name in profiles_here()],
        summaries=[f"results/profiles/{name}/summary.md" for name in profiles_here()],
        overheads=[
            f"results/profiles/{name}/overhead.json"
            for name in profiles_here()
            if name == "cpu"
        ],
        not_measured="results/report/not_measured.json",
        references=references_here(),
    output:
        figures=report(
            directory("results/figures"),
            patterns=["{figure}.png"],
            caption="../report/figure.rst",
            category="Figures",
        ),
        html=report(
            "results/report/index.html",
            caption="../report/index.rst",
            category="Report",
        ),
        markdown="results/report/report.md",
    log:
        "results/logs/report/report.log",
    conda:
        "../../envs/analysis.yaml"
    params:
        inputs=report_args,
        out=lambda wildcards, output: os.path.dirname(output.html),
        captions=lambda wildcards: figure_captions(),
    shell:
        "python -m ring.report {params.inputs} --figures {output.figures}"
        " --out {params.out} > {log} 2>&1"
