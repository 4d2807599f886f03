#!/usr/bin/env python3
"""Writes the copy-kernel variants of docs/hw/2026-11-30-copy-kernel-variants.txt (PTX) into the
current directory, from tests/fixtures/cubins/src/runtime.ptx (path as the first argument).
Assemble each with `ptxas -arch=sm_90 -O3 NAME.ptx -o NAME.cubin` and measure it with
`nvbare bench --runtime-cubin NAME.cubin` (the sK variants want about 1/K of the CTAs:
`--copy-ctas-per-sm 2048/K`). None was faster than the built-in kernel; not kept."""
import sys

src = open(sys.argv[1]).read()
pre, rest = src.split("$L_body:", 1)
body, post = rest.split("$L_tail:", 1)
post = "$L_tail:" + post


def striped(k, ld, st):
    """K vectors per thread, CTA-contiguous chunks of K * ntid vectors, then one at a time."""
    a = [
        "$L_body:",
        "\tadd.s64 \t%rd10, %rd2, %rd8;",
        "\tadd.s64 \t%rd11, %rd1, %rd8;",
        "\tsub.s64 \t%rd12, %rd3, %rd8;",
        "\tshr.u64 \t%rd13, %rd12, 4;",
        "\tcvt.u64.u32 \t%rd30, %r2;",
        f"\tmul.lo.s64 \t%rd31, %rd30, {k};",
        "\tshl.b64 \t%rd32, %rd30, 4;",
        "\tdiv.u64 \t%rd36, %rd13, %rd31;",
        "\tcvt.u64.u32 \t%rd33, %r1;",
        "\tcvt.u64.u32 \t%rd34, %r4;",
        "\tcvt.u64.u32 \t%rd6, %r3;",
        "$L_chunk:",
        "\tsetp.ge.u64 \t%p3, %rd33, %rd36;",
        "\t@%p3 bra \t$L_rest;",
        "\tmul.lo.s64 \t%rd35, %rd33, %rd31;",
        "\tadd.s64 \t%rd35, %rd35, %rd6;",
        "\tshl.b64 \t%rd35, %rd35, 4;",
        "\tadd.s64 \t%rd19, %rd10, %rd35;",
        "\tadd.s64 \t%rd23, %rd11, %rd35;",
    ]
    regs = []
    for j in range(k):
        r = [f"%v{4 * j + i}" for i in range(4)]
        regs.append(r)
        a.append(f"\tmov.u64 \t%ra{j}, %rd19;" if j == 0 else f"\tadd.s64 \t%ra{j}, %ra{j - 1}, %rd32;")
        a.append(f"\t{ld} \t{{{', '.join(r)}}}, [%ra{j}];")
    for j in range(k):
        a.append(f"\tmov.u64 \t%rb{j}, %rd23;" if j == 0 else f"\tadd.s64 \t%rb{j}, %rb{j - 1}, %rd32;")
        a.append(f"\t{st} \t[%rb{j}], {{{', '.join(regs[j])}}};")
    a += [
        "\tadd.s64 \t%rd33, %rd33, %rd34;",
        "\tbra.uni \t$L_chunk;",
        "$L_rest:",
        "\tmul.lo.s64 \t%rd14, %rd36, %rd31;",
        "\tadd.s64 \t%rd14, %rd14, %rd4;",
        "$L_one:",
        "\tsetp.ge.u64 \t%p4, %rd14, %rd13;",
        "\t@%p4 bra \t$L_tail;",
        "\tshl.b64 \t%rd18, %rd14, 4;",
        "\tadd.s64 \t%rd19, %rd10, %rd18;",
        f"\t{ld} \t{{%r5, %r6, %r7, %r8}}, [%rd19];",
        "\tadd.s64 \t%rd23, %rd11, %rd18;",
        f"\t{st} \t[%rd23], {{%r5, %r6, %r7, %r8}};",
        "\tadd.s64 \t%rd14, %rd14, %rd5;",
        "\tbra.uni \t$L_one;",
        "",
    ]
    decl = f"\t.reg .b32 \t%v<{4 * k}>;\n\t.reg .b64 \t%ra<{k}>;\n\t.reg .b64 \t%rb<{k}>;\n"
    p = pre.replace("\t.reg .b64 \t%rd<40>;\n", "\t.reg .b64 \t%rd<40>;\n" + decl)
    return p + "\n".join(a) + "\n" + post


LD, ST = "ld.global.v4.u32", "st.global.v4.u32"
LDNC, STCS = "ld.global.nc.L1::no_allocate.v4.u32", "st.global.cs.v4.u32"
variants = {
    "s2": striped(2, LD, ST),
    "s4": striped(4, LD, ST),
    "s4nc": striped(4, LDNC, ST),
    "s4cs": striped(4, LDNC, STCS),
    "s8": striped(8, LD, ST),
    "s8nc": striped(8, LDNC, ST),
    "v1nc": src.replace(LD, LDNC),
    "v1cs": src.replace(LD, LDNC).replace(ST, STCS),
    "l2p256": src.replace(LD, "ld.global.L2::256B.v4.u32"),
    "l2p128": src.replace(LD, "ld.global.L2::128B.v4.u32"),
    "ldcs": src.replace(LD, "ld.global.cs.v4.u32"),
    "ldlu": src.replace(LD, "ld.global.lu.v4.u32"),
    "stcs": src.replace(ST, STCS),
    "l2p256stcs": src.replace(LD, "ld.global.L2::256B.v4.u32").replace(ST, STCS),
}
for name, text in variants.items():
    with open(name + ".ptx", "w") as f:
        f.write(text)
