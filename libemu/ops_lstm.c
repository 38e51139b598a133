/*
 * ops_lstm.c — one LSTM layer (emu_t_lstm, emu_t_lstm_backward).
 * Placeholder while the op is written: both refuse with EMU_EUNSUPPORTED,
 * so that code written against emu/ops.h's LSTM section links meanwhile.
 */
#include "hostfp.h" /* first: no contraction, no excess precision */

#include "ops_internal.h"

int emu_t_lstm(emu_ctx *ctx, const char *site, emu_tensor *y, emu_tensor *gates, emu_tensor *c, emu_tensor *h_n, emu_tensor *c_n, const emu_tensor *x, const emu_tensor *h0, const emu_tensor *c0, const emu_lstm_weights *w, const emu_lstm_opts *o, const emu_rounding *rnd)
{
    (void)y, (void)gates, (void)c, (void)h_n, (void)c_n, (void)x, (void)h0,
        (void)c0, (void)w, (void)o, (void)rnd;
    return emu_ctx_fail(ctx, site, "emu_t_lstm: not implemented yet");
}

int emu_t_lstm_backward(emu_ctx *ctx, const char *site, emu_tensor *dx, const emu_lstm_grads *g, const emu_tensor *dy, const emu_tensor *x, const emu_tensor *y, const emu_tensor *gates, const emu_tensor *c, const emu_tensor *h0, const emu_tensor *c0, const emu_lstm_weights *w, const emu_lstm_opts *o, const emu_rounding *rnd)
{
    (void)dx, (void)g, (void)dy, (void)x, (void)y, (void)gates, (void)c,
        (void)h0, (void)c0, (void)w, (void)o, (void)rnd;
    return emu_ctx_fail(ctx, site, "emu_t_lstm_backward: not implemented yet");
}
