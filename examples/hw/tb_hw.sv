// tb_hw.sv — checks the example units against libemu, op by op, through
// the DPI-C golden model (emu_dpi.sv): every pair of 8-bit operands
// through four multipliers (E4M3 and E5M2, with and without saturation),
// a random plus edge-case set through three dot-product units (E4M3 at
// W = 16 and 26, E5M2 at W = 26), and the same for the deliberately
// defective variants, which must be caught.
//
// Each mismatch is printed with its operands, one line each:
//   MISMATCH <unit> a=.. b=.. rtl=../.. emu=../..
// and each unit ends with
//   SUMMARY <unit> cases=N mismatches=M
// Plusargs: +dot_count=N random dot cases (default 100000), +seed=S
// (a non-zero start for the xorshift generator),
// +max_print=N mismatch lines per unit (default 20), +nodpi to skip the
// golden model (to time the DPI calls by difference); the file flow's
// plusargs are described at mul_file below.
module tb_hw;
  import emu_dpi::*;

  // ---- the units ---------------------------------------------------------
  logic [7:0] ma, mb;
  logic [7:0] my[5];
  logic [4:0] mf[5];
  fp8_mul #(.EBITS(4), .SAT(1'b0)) mul0 (ma, mb, my[0], mf[0]);
  fp8_mul #(.EBITS(4), .SAT(1'b1)) mul1 (ma, mb, my[1], mf[1]);
  fp8_mul #(.EBITS(5), .SAT(1'b0)) mul2 (ma, mb, my[2], mf[2]);
  fp8_mul #(.EBITS(5), .SAT(1'b1)) mul3 (ma, mb, my[3], mf[3]);
  fp8_mul #(.EBITS(4), .SAT(1'b1), .DEFECT(1'b1))
      mul_defect (ma, mb, my[4], mf[4]);
  localparam string MUL_NAME[5] = '{"mul_e4m3", "mul_e4m3_sat", "mul_e5m2",
                                    "mul_e5m2_sat", "mul_e4m3_sat_defect"};
  localparam string MUL_FMT[5] = '{"e4m3", "e4m3", "e5m2", "e5m2", "e4m3"};
  localparam string MUL_SET[5] = '{"rne", "rne,sat", "rne", "rne,sat",
                                   "rne,sat"};

  logic [3:0][7:0] da, db;
  logic [31:0] dc;
  logic [31:0] dy[4];
  // W = 16 sums stay within binary32's 24 bits (the final rounding is
  // exact); W = 26 makes that rounding, ties included, do work.
  fp8_dot4 #(.EBITS(4), .W(16)) dot0 (da, db, dc, dy[0]);
  fp8_dot4 #(.EBITS(4), .W(26)) dot1 (da, db, dc, dy[1]);
  fp8_dot4 #(.EBITS(5), .W(26)) dot2 (da, db, dc, dy[2]);
  fp8_dot4 #(.EBITS(4), .W(16), .DEFECT(1'b1))
      dot_defect (da, db, dc, dy[3]);
  localparam int NDOT = 4;
  localparam string DOT_NAME[NDOT] = '{"dot_e4m3_w16", "dot_e4m3_w26",
                                       "dot_e5m2_w26", "dot_e4m3_w16_defect"};
  localparam string DOT_FMT[NDOT] = '{"e4m3", "e4m3", "e5m2", "e4m3"};
  localparam int DOT_W[NDOT] = '{16, 26, 26, 16};

  // ---- bookkeeping -------------------------------------------------------
  int max_print = 20;
  bit use_dpi = 1'b1;
  longint unsigned rng = 64'h9e3779b97f4a7c15;
  longint unsigned dpi_calls = 0;

  function automatic longint unsigned next_random();
    rng ^= rng << 13;  // xorshift64: the same cases on every simulator
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
  endfunction

  function automatic int open_or_die(input int h);
    if (h < 0) $fatal(1, "emu_dpi_open: %s", emu_dpi_last_error());
    return h;
  endfunction

  // ---- the multipliers: every pair of operands ---------------------------
  task automatic check_mul();
    int h[5];
    int bad[5] = '{default: 0};
    emu_pat_t r;
    int unsigned f;
    for (int u = 0; u < 5; u++)
      h[u] = open_or_die(emu_dpi_open(MUL_FMT[u], "", MUL_SET[u]));
    for (int i = 0; i < 65536; i++) begin
      ma = 8'(i >> 8);
      mb = 8'(i);
      #1;
      if (use_dpi)
        for (int u = 0; u < 5; u++) begin
          if (emu_dpi_mul(h[u], 64'(ma), 64'(mb), r, f) != 0)
            $fatal(1, "emu_dpi_mul: %s", emu_dpi_last_error());
          dpi_calls++;
          if (r != 64'(my[u]) || f != 32'(mf[u])) begin
            if (bad[u] < max_print)
              $display("MISMATCH %s a=%02h b=%02h rtl=%02h/%02h emu=%02h/%02h",
                       MUL_NAME[u], ma, mb, my[u], mf[u], 8'(r), 8'(f));
            bad[u]++;
          end
        end
    end
    for (int u = 0; u < 5; u++)
      $display("SUMMARY %s cases=65536 mismatches=%0d", MUL_NAME[u], bad[u]);
  endtask

  // ---- the dot units: edge cases, then random ones -----------------------
  // Operands a dot unit must get right whatever the rest: zeros, the
  // subnormal and normal extremes, one, and the specials of each format.
  localparam logic [7:0] EDGE8[12] = '{8'h00, 8'h80, 8'h01, 8'h87, 8'h08,
                                       8'h38, 8'hb8, 8'h7b, 8'h7c, 8'h7e,
                                       8'hfe, 8'h7f};
  localparam logic [31:0] EDGE32[10] = '{32'h00000000, 32'h80000000,
                                         32'h3f800000, 32'hbf800000,
                                         32'h00000001, 32'h7f7fffff,
                                         32'h7f800000, 32'hff800000,
                                         32'h7fc00000, 32'h4b800001};

  int dot_h[NDOT];
  int dot_miss[NDOT] = '{default: 0};
  int dot_cases = 0;

  task automatic check_dot_case();
    emu_pat_t r;
    int unsigned f;
    #1;
    dot_cases++;
    if (!use_dpi) return;
    for (int u = 0; u < NDOT; u++) begin
      if (emu_dpi_dot4(dot_h[u], 64'(da[0]), 64'(db[0]), 64'(da[1]),
                       64'(db[1]), 64'(da[2]), 64'(db[2]), 64'(da[3]),
                       64'(db[3]), 64'(dc), r, f) != 0)
        $fatal(1, "emu_dpi_dot4: %s", emu_dpi_last_error());
      dpi_calls++;
      // The units raise no flags; with out = acc = binary32 the final
      // rounding raises none either, so any flag is a mismatch too.
      if (r != 64'(dy[u]) || f != 0) begin
        if (dot_miss[u] < max_print)
          $display("MISMATCH %s a=%02h,%02h,%02h,%02h b=%02h,%02h,%02h,%02h c=%08h rtl=%08h emu=%08h",
                   DOT_NAME[u], da[0], da[1], da[2], da[3], db[0], db[1],
                   db[2], db[3], dc, dy[u], 32'(r));
        dot_miss[u]++;
      end
    end
  endtask

  // A random binary32 accumulator input: mostly near the products' scale
  // (where alignment decides), sometimes anything, sometimes zero.
  function automatic logic [31:0] random_c();
    longint unsigned x = next_random();
    case (x[1:0])
      2'd0: return 32'(x >> 32) & 32'h80000000;
      2'd1: return 32'(x >> 32);
      default: return {x[63], 8'(127 + int'(x[40:36]) - 16), x[62:40]};
    endcase
  endfunction

  task automatic check_dot(input int count);
    for (int u = 0; u < NDOT; u++)
      dot_h[u] = open_or_die(emu_dpi_open_dot(DOT_FMT[u],
          $sformatf("fused,k=4,w=%0d,acc=binary32", DOT_W[u]), "", "rne"));
    // Directed: 448 * 448 + 2 * 2 = 200708 exactly; with W = 16 the 4
    // lands on the last aligned bit, the one the defective unit drops.
    da = {8'h00, 8'h00, 8'h40, 8'h7e};
    db = da;
    dc = '0;
    check_dot_case();
    // Each edge operand against each other in the first term, with every
    // edge accumulator input; the other terms random.
    foreach (EDGE8[i])
      foreach (EDGE8[j])
        foreach (EDGE32[k]) begin
          da[0] = EDGE8[i];
          db[0] = EDGE8[j];
          for (int t = 1; t < 4; t++) begin
            da[t] = 8'(next_random());
            db[t] = 8'(next_random());
          end
          dc = EDGE32[k];
          check_dot_case();
        end
    for (int n = 0; n < count; n++) begin
      longint unsigned x = next_random();
      for (int t = 0; t < 4; t++) begin
        da[t] = 8'(x >> (16 * t));
        db[t] = 8'(x >> (16 * t + 8));
      end
      // One case in four cancels the first product exactly, so that the
      // small terms and the accumulator input decide the result.
      if (x[5:4] == 2'd0) begin
        da[1] = da[0] ^ 8'h80;
        db[1] = db[0];
      end
      dc = random_c();
      check_dot_case();
    end
    for (int u = 0; u < NDOT; u++)
      $display("SUMMARY %s cases=%0d mismatches=%0d", DOT_NAME[u], dot_cases,
               dot_miss[u]);
  endtask

  // ---- the file flow: `emu gen` vectors in, the unit's results out -----
  // +mul_in=FILE (emu gen lines without the '#' header, read by
  // $readmemh) drives mul_e4m3_sat; +mul_out=FILE gets "A B RESULT FLAGS"
  // lines for `emu verify`.  +dot_in/+dot_out do the same for dot_e4m3
  // (W = 16) with `emu dot gen` lines of K = 4 (C = +0).
  localparam int MUL_FILE_MAX = 65536, DOT_FILE_MAX = 20000;
  logic [7:0] mul_mem[4 * MUL_FILE_MAX];
  logic [31:0] dot_mem[10 * DOT_FILE_MAX];

  task automatic mul_file(input string in, input string out, input int n);
    int fd;
    if (n > MUL_FILE_MAX) $fatal(1, "mul_n=%0d: at most %0d", n, MUL_FILE_MAX);
    $readmemh(in, mul_mem, 0, 4 * n - 1);
    fd = $fopen(out, "w");
    if (fd == 0) $fatal(1, "cannot write %s", out);
    for (int i = 0; i < n; i++) begin
      ma = mul_mem[4 * i];
      mb = mul_mem[4 * i + 1];
      #1;
      $fwrite(fd, "%02h %02h %02h %02h\n", ma, mb, my[1], 8'(mf[1]));
    end
    $fclose(fd);
  endtask

  task automatic dot_file(input string in, input string out, input int n);
    int fd;
    if (n > DOT_FILE_MAX) $fatal(1, "dot_n=%0d: at most %0d", n, DOT_FILE_MAX);
    $readmemh(in, dot_mem, 0, 10 * n - 1);
    fd = $fopen(out, "w");
    if (fd == 0) $fatal(1, "cannot write %s", out);
    dc = '0;
    for (int i = 0; i < n; i++) begin
      for (int t = 0; t < 4; t++) begin
        da[t] = 8'(dot_mem[10 * i + 2 * t]);
        db[t] = 8'(dot_mem[10 * i + 2 * t + 1]);
      end
      #1;
      // The unit has no flag outputs; the file's flags are those of a
      // binary32 result rounded into binary32: none.
      $fwrite(fd, "%02h %02h %02h %02h %02h %02h %02h %02h %08h 00\n",
              da[0], db[0], da[1], db[1], da[2], db[2], da[3], db[3], dy[0]);
    end
    $fclose(fd);
  endtask

  initial begin
    int count = 100000;
    string in, out;
    int n;
    longint unsigned seed;
    if ($value$plusargs("mul_in=%s", in) && $value$plusargs("mul_out=%s", out)
        && $value$plusargs("mul_n=%d", n)) begin
      mul_file(in, out, n);
      if ($value$plusargs("dot_in=%s", in) && $value$plusargs("dot_out=%s", out)
          && $value$plusargs("dot_n=%d", n))
        dot_file(in, out, n);
      $finish;
    end
    void'($value$plusargs("dot_count=%d", count));
    void'($value$plusargs("max_print=%d", max_print));
    if ($value$plusargs("seed=%d", seed) && seed != 0) rng = seed;
    use_dpi = !$test$plusargs("nodpi");
    check_mul();
    check_dot(count);
    $display("DPI calls=%0d", dpi_calls);
    $finish;
  end
endmodule
