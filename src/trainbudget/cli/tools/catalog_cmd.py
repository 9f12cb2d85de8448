"""`trainbudget models`, `hardware` and `dtypes`: the data tables, as text or JSON."""

from __future__ import annotations

import argparse

from trainbudget.cli.args import dumps_json
from trainbudget.core.units import GB, TB


def add_arguments(p: argparse.ArgumentParser, _name: str) -> None:
    p.add_argument("--json", action="store_true", help="print JSON")


def _models(as_json: bool) -> None:
    from trainbudget.core.single.params import count_params
    from trainbudget.core.spec.presets import PRESETS

    rows = []
    for name, spec in PRESETS.items():
        p = count_params(spec)
        rows.append(
            {
                "name": name,
                "params": p.total,
                "active_params": p.active,
                "n_layers": spec.n_layers,
                "d_model": spec.d_model,
                "n_heads": spec.n_heads,
                "n_kv_heads": spec.n_kv_heads,
                "max_seq_len": spec.max_seq_len,
                "source": spec.sources[0],
            }
        )
    if as_json:
        print(dumps_json(rows))
        return
    print(
        f"{'name':<14} {'params':>17} {'active':>17} {'layers':>6} {'d_model':>7} "
        f"{'heads':>5} {'kv':>3} {'context':>7}"
    )
    for r in rows:
        print(
            f"{r['name']:<14} {r['params']:>17,} {r['active_params']:>17,} {r['n_layers']:>6} "
            f"{r['d_model']:>7} {r['n_heads']:>5} {r['n_kv_heads']:>3} {r['max_seq_len']:>7}"
        )


def _hardware(as_json: bool) -> None:
    from trainbudget.core.spec.hardware import HARDWARE

    if as_json:
        print(
            dumps_json(
                [
                    {
                        "name": h.name,
                        "description": h.description,
                        "memory_bytes": h.memory_bytes,
                        "device_memory_bytes": h.device_memory_bytes,
                        "device_memory_source": h.device_memory_source,
                        "hbm_bytes_per_second": h.hbm_bytes_per_second,
                        "dense_flops_per_second": dict(h.dense_flops_per_second),
                        "sparse_flops_per_second": dict(h.sparse_flops_per_second),
                        "intra_node_bytes_per_second": h.intra_node_bytes_per_second,
                        "inter_node_bytes_per_second": h.inter_node_bytes_per_second,
                        "gpus_per_node": h.gpus_per_node,
                        "source_urls": list(h.source_urls),
                        "notes": h.notes,
                    }
                    for h in HARDWARE.values()
                ],
                indent=2,
            )
        )
        return
    print(
        f"{'name':<10} {'memory':>8} {'HBM':>9} {'fp32':>7} {'tf32':>7} {'bf16':>7} "
        f"{'fp8':>7} {'intra':>8} {'inter':>7} {'/node':>5}   (dense TFLOP/s; GB, GB/s)"
    )
    for h in HARDWARE.values():

        def tf(dtype: str, h=h) -> str:
            v = h.dense_flops_per_second.get(dtype)
            return f"{v / TB:7.1f}" if v else "      -"

        print(
            f"{h.name:<10} {h.memory_bytes / GB:>8.0f} {h.hbm_bytes_per_second / GB:>9.0f} "
            f"{tf('fp32')} {tf('tf32')} {tf('bf16')} {tf('fp8')} "
            f"{h.intra_node_bytes_per_second / GB:>8.0f} "
            f"{h.inter_node_bytes_per_second / GB:>7.1f} {h.gpus_per_node:>5}"
        )
    print(
        "links are per GPU, one direction; sparse peaks are never used by default "
        "(--json has them and the sources)"
    )


def _dtypes(as_json: bool) -> None:
    from trainbudget.core.spec.dtypes import FORMATS

    rows = [
        {
            "name": f.name,
            "sign_bits": f.sign_bits,
            "exponent_bits": f.exponent_bits,
            "mantissa_bits": f.mantissa_bits,
            "bytes": f.storage_bytes,
            "max": f.max_value,
            "smallest_normal": f.smallest_normal,
            "smallest_subnormal": f.smallest_subnormal,
            "eps": f.eps,
        }
        for f in FORMATS.values()
    ]
    if as_json:
        print(dumps_json(rows))
        return
    print(
        f"{'name':<9} {'s/e/m':>7} {'bytes':>5} {'max':>11} {'min normal':>11} "
        f"{'min subnormal':>13} {'eps':>9}"
    )
    for r in rows:
        sem = f"{r['sign_bits']}/{r['exponent_bits']}/{r['mantissa_bits']}"
        print(
            f"{r['name']:<9} {sem:>7} {r['bytes']:>5g} {r['max']:>11.5g} "
            f"{r['smallest_normal']:>11.4g} {r['smallest_subnormal']:>13.4g} {r['eps']:>9.3g}"
        )


def run(args: argparse.Namespace) -> int:
    {"models": _models, "hardware": _hardware, "dtypes": _dtypes}[args.command](args.json)
    return 0
