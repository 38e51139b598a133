/*
 * arith_bits.c — the scalar operations on bit patterns.
 *
 * This is what test vectors are made of (emu gen / emu verify): operands
 * and results as patterns, flags as TestFloat numbers them.  It adds to the
 * value layer what values cannot carry: signaling NaNs (an operand that is
 * one raises invalid, unless the profile makes narrow NaNs quiet) and the
 * particular NaN pattern a result gets (the profile's default NaN, or the
 * NaN operand's sign and payload where the profile keeps them).
 */
#include "hostfp.h" /* first: no contraction, no excess precision */

#include "emu/arith.h"

#include "internal.h"

#include <math.h>
#include <string.h>

static const struct {
    const char *name;
    int arity;
} ops[EMU_OP_COUNT] = {
    [EMU_OP_ADD] = { "add", 2 },         [EMU_OP_SUB] = { "sub", 2 },
    [EMU_OP_MUL] = { "mul", 2 },         [EMU_OP_DIV] = { "div", 2 },
    [EMU_OP_SQRT] = { "sqrt", 1 },       [EMU_OP_FMA] = { "fma", 3 },
    [EMU_OP_CONVERT] = { "convert", 1 }, [EMU_OP_EQ] = { "eq", 2 },
    [EMU_OP_LT] = { "lt", 2 },           [EMU_OP_LE] = { "le", 2 },
};

const char *emu_op_name(emu_op op)
{
    return (unsigned)op < EMU_OP_COUNT ? ops[op].name : "?";
}

int emu_op_parse(const char *s, emu_op *op)
{
    for (int i = 0; s && i < EMU_OP_COUNT; i++)
        if (!strcmp(s, ops[i].name)) {
            *op = (emu_op)i;
            return 0;
        }
    return -1;
}

int emu_op_arity(emu_op op)
{
    return (unsigned)op < EMU_OP_COUNT ? ops[op].arity : 0;
}

bool emu_op_is_compare(emu_op op)
{
    return op == EMU_OP_EQ || op == EMU_OP_LT || op == EMU_OP_LE;
}

int emu_bits_op(emu_op op, const emu_format *in, const emu_format *out,
                const emu_bits *operands, const emu_rounding *r,
                emu_bits *res, emu_status *st, emu_error *err)
{
    EMU_HOSTFP_GUARD;
    emu_status local;
    if (!st)
        st = &local;
    st->ternary = 0;
    st->flags = 0;
    if ((unsigned)op >= EMU_OP_COUNT)
        return emu_fail(err, EMU_EINVAL, "bits op", "op", "unknown op %d",
                        (int)op);
    /* Arithmetic needs binary32 operands; conversions and comparisons
     * take any format. */
    if (op != EMU_OP_CONVERT && !emu_op_is_compare(op) &&
        !emu_arith_supported(in))
        return emu_fail(err, EMU_EUNSUPPORTED, emu_op_name(op), "in",
                        "operands in %s: arithmetic needs formats of at most "
                        "24 bits of precision inside binary32's range",
                        in->name);

    static const emu_rounding ieee;
    const emu_profile *prof = &(r ? r : &ieee)->profile;
    const int n = emu_op_arity(op);
    double v[3] = { 0.0, 0.0, 0.0 };
    bool signaling = false;
    for (int i = 0; i < n; i++) {
        if (in->bits < 64 && operands[i].v >> in->bits)
            return emu_fail(err, EMU_EINVAL, emu_op_name(op), "operands",
                            "operand %d (0x%llx) is wider than %s's %d bits",
                            i + 1, (unsigned long long)operands[i].v,
                            in->name, in->bits);
        v[i] = emu_decode_unguarded(in, operands[i]);
        signaling |= emu_is_signaling_in(in, prof, operands[i]);
    }

    double x;
    switch (op) {
    case EMU_OP_ADD: x = emu_add(out, v[0], v[1], r, st); break;
    case EMU_OP_SUB: x = emu_sub(out, v[0], v[1], r, st); break;
    case EMU_OP_MUL: x = emu_mul(out, v[0], v[1], r, st); break;
    case EMU_OP_DIV: x = emu_div(out, v[0], v[1], r, st); break;
    case EMU_OP_SQRT: x = emu_sqrt(out, v[0], r, st); break;
    case EMU_OP_FMA: x = emu_fma(out, v[0], v[1], v[2], r, st); break;
    case EMU_OP_CONVERT: x = emu_convert(out, v[0], r, st); break;
    default: {
        bool t = op == EMU_OP_EQ ? emu_eq(v[0], v[1], st)
               : op == EMU_OP_LT ? emu_lt(v[0], v[1], st)
                                 : emu_le(v[0], v[1], st);
        if (signaling)
            st->flags |= EMU_FLAG_INVALID;
        res->v = t;
        return 0;
    }
    }
    if (signaling)
        st->flags |= EMU_FLAG_INVALID;
    if (isnan(x)) {
        /* A format without NaN has no pattern for this result: +0, and
         * the invalid flag says the value is not a number (unless the
         * profile keeps quiet about it). */
        if (!emu_encode_in(out, prof, x, res) && !prof->quiet_unrepresentable)
            st->flags |= EMU_FLAG_INVALID;
        return 0;
    }
    if (!emu_encode_unguarded(out, x, res))
        return emu_fail(err, EMU_EUNSUPPORTED, emu_op_name(op), "out",
                        "the result %g has no pattern in %s", x, out->name);
    return 0;
}

int emu_bits_op_word(emu_op op, const emu_format *in, const emu_format *out,
                     const emu_bits *operands, const emu_rounding *r,
                     uint64_t word, emu_bits *res, emu_status *st,
                     emu_error *err)
{
    EMU_HOSTFP_GUARD;
    emu_arith_given_word(&word);
    int rc = emu_bits_op(op, in, out, operands, r, res, st, err);
    emu_arith_given_word(NULL);
    return rc;
}
