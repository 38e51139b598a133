/*
 * emu/emu.h — the public API of libemu in one include.
 *
 * Everything a program needs to round, compute, train and measure.  It
 * does not include <mpfr.h>: the two headers that do are opt-in,
 * emu/extend.h (writing a new op: the choke point's interface) and
 * emu/ref.h (the MPFR oracle).  A CTest (api_emu_h_no_mpfr) holds this.
 */
#ifndef EMU_EMU_H
#define EMU_EMU_H

#include "emu/accum.h"
#include "emu/arith.h"
#include "emu/bits.h"
#include "emu/data.h"
#include "emu/dpi.h"
#include "emu/error.h"
#include "emu/ffi.h"
#include "emu/format.h"
#include "emu/nn.h"
#include "emu/ops.h"
#include "emu/rng.h"
#include "emu/scaled.h"
#include "emu/round.h"
#include "emu/stats.h"
#include "emu/tensor.h"
#include "emu/tensorfile.h"
#include "emu/version.h"

#endif
