/*
 * ops_attn.c — causal multi-head self-attention (emu_t_attention and its
 * backward pass).  Not implemented yet: the next commit.
 */
#include "hostfp.h" /* first: no contraction, no excess precision */

#include "ops_internal.h"

int emu_t_attention(emu_ctx *ctx, const char *site, emu_tensor *out,
                    emu_tensor *att, const emu_tensor *qkv,
                    const emu_attention_opts *o, const emu_rounding *rnd)
{
    (void)out, (void)att, (void)qkv, (void)o, (void)rnd;
    return emu_ctx_failc(ctx, EMU_EUNSUPPORTED, site ? site : "attention",
                         "attention is not implemented yet");
}

int emu_t_attention_backward(emu_ctx *ctx, const char *site, emu_tensor *dqkv,
                             const emu_tensor *dout, const emu_tensor *qkv,
                             const emu_tensor *att,
                             const emu_attention_opts *o, const emu_rounding *rnd)
{
    (void)dqkv, (void)dout, (void)qkv, (void)att, (void)o, (void)rnd;
    return emu_ctx_failc(ctx, EMU_EUNSUPPORTED, site ? site : "attention",
                         "attention is not implemented yet");
}
