/*
 * emu/emu.h — the whole public API of libemu in one include.
 */
#ifndef EMU_EMU_H
#define EMU_EMU_H

#include "emu/accum.h"
#include "emu/arith.h"
#include "emu/bits.h"
#include "emu/data.h"
#include "emu/dpi.h"
#include "emu/error.h"
#include "emu/format.h"
#include "emu/nn.h"
#include "emu/ops.h"
#include "emu/ref.h"
#include "emu/rng.h"
#include "emu/scaled.h"
#include "emu/round.h"
#include "emu/stats.h"
#include "emu/tensor.h"
#include "emu/version.h"

#endif
