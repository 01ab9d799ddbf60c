/* svg.c: inline SVG charts and the report's text primitives (see svg.h). */
#include "svg.h"

#include <math.h>
#include <string.h>

#include "base/utf8.h"

/* ---- geometry (SVG user units = CSS pixels) ----------------------------- */

/* Line chart: overall size and the margins around the plot area. */
#define LINE_WIDTH 900.0
#define LINE_HEIGHT 340.0
#define LINE_MARGIN_LEFT 78.0
#define LINE_MARGIN_RIGHT 190.0   /* the legend lives here */
#define LINE_MARGIN_TOP 16.0
#define LINE_MARGIN_BOTTOM 58.0
/* The dash pattern of a dashed series (svg_series.dashed): dash, gap. */
#define LINE_DASH "6 4"
/* Inset of the first and last x position from the plot edges. */
#define LINE_X_PAD 14.0
/* Legend: row pitch, swatch length, gap between plot and legend. */
#define LEGEND_ROW 18.0
#define LEGEND_SWATCH 22.0
#define LEGEND_GAP 16.0
/* Fewest pixels between two x tick labels. */
#define X_LABEL_MIN_GAP 30.0
/* Point markers: radius, and the smaller radius once x positions are many. */
#define MARKER_R 3.2
#define MARKER_R_SMALL 2.0
#define MARKER_CROWDED_N 60
/* Most labelled decades on a log axis before labels are thinned out. */
#define LOG_MAX_LABELS 10
/* Minor (2..9) gridlines are drawn up to this many decades. */
#define LOG_MINOR_MAX_DECADES 6
/* Decades shown when a log axis has no data at all. */
#define LOG_EMPTY_LO (-3.0)
#define LOG_EMPTY_HI 0.0
/* Target number of steps on a linear axis. */
#define LINEAR_TARGET_STEPS 5.0
/* Font sizes. */
#define FONT_TICK 11
#define FONT_TITLE 12

/* Heatmap: row label column, cell size bounds, the colour bar. */
#define HEAT_MARGIN_LEFT 110.0
#define HEAT_MARGIN_RIGHT 24.0
#define HEAT_MARGIN_TOP 10.0
#define HEAT_PLOT_MAX_W 760.0
#define HEAT_CELL_MIN_W 3.0
#define HEAT_CELL_MAX_W 28.0
#define HEAT_CELL_H 26.0
#define HEAT_MIN_WIDTH 620.0
#define HEAT_AXIS_BAND 44.0      /* tick labels and the x title under the cells */
#define HEAT_BAR_W 300.0
#define HEAT_BAR_H 14.0
#define HEAT_BAR_STEPS 60
#define HEAT_LEGEND_BAND 64.0
/* Colours of cells off the scale. */
#define HEAT_COLOUR_MISSING "#e0e0e0"
#define HEAT_COLOUR_ZERO "#ffffff"
#define HEAT_COLOUR_NONFINITE "#e6194b"
/* A colour scale narrower than this (in log10) is widened to it. */
#define HEAT_MIN_LOG_SPAN 1e-9

/* Error bars: size, margins, half-width of the caps, marker radius. */
#define BARS_MAX_WIDTH 900.0
#define BARS_SLOT_MIN 70.0
#define BARS_MIN_WIDTH 360.0
#define BARS_HEIGHT 330.0
#define BARS_MARGIN_LEFT 78.0
#define BARS_MARGIN_RIGHT 20.0
#define BARS_MARGIN_TOP 16.0
#define BARS_MARGIN_BOTTOM 96.0
#define BARS_CAP 7.0
#define BARS_MARKER_R 4.5
/* Rotation of crowded category labels, degrees. */
#define LABEL_ROTATE_DEG (-35)

/* Colours of axes, gridlines and captions. */
#define COLOUR_AXIS "#333333"
#define COLOUR_GRID "#d9d9d9"
#define COLOUR_GRID_MINOR "#efefef"
#define COLOUR_CAPTION "#777777"

/* viridis at 0, .25, .5, .75, 1: dark blue (small) to yellow (large). */
static const unsigned char VIRIDIS[][3] = {
    {0x44, 0x01, 0x54}, {0x3b, 0x52, 0x8b}, {0x21, 0x91, 0x8c}, {0x5e, 0xc9, 0x62},
    {0xfd, 0xe7, 0x25},
};
#define VIRIDIS_N (sizeof VIRIDIS / sizeof VIRIDIS[0])

/* ---- text ----------------------------------------------------------------- */

const char *svg_fmt_num(char *buf, size_t len, double v)
{
    if (isnan(v)) snprintf(buf, len, "NaN");
    else if (isinf(v)) snprintf(buf, len, v > 0 ? "inf" : "-inf");
    else snprintf(buf, len, "%.3g", v);
    return buf;
}

void svg_put_escaped(FILE *out, const char *s)
{
    if (s == NULL) return;
    for (size_t n; *s != '\0'; s += n) {
        if (utf8_markup_len(s, &n) == 0) {
            fputc('?', out);  /* as junit_escape: the document stays well-formed */
            continue;
        }
        if (n > 1) {
            fwrite(s, 1, n, out);
            continue;
        }
        switch (*s) {
        case '&': fputs("&amp;", out); break;
        case '<': fputs("&lt;", out); break;
        case '>': fputs("&gt;", out); break;
        case '"': fputs("&quot;", out); break;
        case '\'': fputs("&#39;", out); break;
        default: fputc(*s, out);
        }
    }
}

/* Writes a <text> element at (x, y) with the given anchor and size; text escaped. */
static void put_text(FILE *out, double x, double y, const char *anchor, int size,
                     const char *text)
{
    fprintf(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" font-size=\"%d\">", x, y,
            anchor, size);
    svg_put_escaped(out, text);
    fputs("</text>\n", out);
}

/* Opens the <svg> element: size, accessible name and the shared font. */
static void open_svg(FILE *out, double w, double h, const char *title)
{
    fprintf(out,
            "<svg class=\"chart\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
            "role=\"img\" aria-label=\"",
            w, h, w, h);
    svg_put_escaped(out, title);
    fputs("\" font-family=\"sans-serif\" fill=\"#222222\">\n<title>", out);
    svg_put_escaped(out, title);
    fputs("</title>\n", out);
}

/* ---- axes ----------------------------------------------------------------- */

/* A y axis: on a log axis lo and hi are whole decades (exponents). */
typedef struct axis {
    svg_scale scale;
    double lo, hi;       /* range (log: exponents) */
    double step;         /* linear tick step */
    double py_lo, py_hi; /* pixel rows of lo (bottom) and hi (top) */
} axis;

/* Whether v can be placed on an axis of this scale. */
static int placeable(svg_scale scale, double v)
{
    return isfinite(v) && (scale == SVG_SCALE_LINEAR || v > 0);
}

/* A "nice" step (1, 2 or 5 times a power of ten) near raw (> 0). */
static double nice_step(double raw)
{
    const double mag = pow(10.0, floor(log10(raw)));
    const double f = raw / mag;
    return (f <= 1.0 ? 1.0 : f <= 2.0 ? 2.0 : f <= 5.0 ? 5.0 : 10.0) * mag;
}

/* Sets up ax from the data extremes (lo > hi: no data) and an optional fixed
 * linear range; rows py_bottom (lo) .. py_top (hi). */
static void axis_init(axis *ax, svg_scale scale, double dmin, double dmax, double fix_lo,
                      double fix_hi, double py_bottom, double py_top)
{
    ax->scale = scale;
    ax->py_lo = py_bottom;
    ax->py_hi = py_top;
    ax->step = 1.0;
    if (scale == SVG_SCALE_LOG10) {
        if (dmin > dmax) {
            ax->lo = LOG_EMPTY_LO;
            ax->hi = LOG_EMPTY_HI;
            return;
        }
        ax->lo = floor(log10(dmin));
        ax->hi = ceil(log10(dmax));
        if (ax->hi <= ax->lo) ax->hi = ax->lo + 1.0;
        return;
    }
    double lo, hi;
    if (isfinite(fix_lo) && isfinite(fix_hi) && fix_hi > fix_lo) {
        lo = fix_lo;
        hi = fix_hi;
    } else if (dmin > dmax) {
        lo = 0.0;
        hi = 1.0;
    } else {
        lo = dmin;
        hi = dmax;
        if (hi - lo <= fabs(hi) * 1e-12) {
            const double pad = fabs(hi) > 0 ? fabs(hi) * 0.1 : 0.5;
            lo -= pad;
            hi += pad;
        }
    }
    ax->step = nice_step((hi - lo) / LINEAR_TARGET_STEPS);
    if (!(isfinite(fix_lo) && isfinite(fix_hi) && fix_hi > fix_lo)) {
        lo = floor(lo / ax->step) * ax->step;
        hi = ceil(hi / ax->step) * ax->step;
    }
    ax->lo = lo;
    ax->hi = hi;
}

/* The pixel row of v (placeable(ax->scale, v) must hold). */
static double axis_y(const axis *ax, double v)
{
    const double t = ax->scale == SVG_SCALE_LOG10 ? (log10(v) - ax->lo) / (ax->hi - ax->lo)
                                                  : (v - ax->lo) / (ax->hi - ax->lo);
    return ax->py_lo + t * (ax->py_hi - ax->py_lo);
}

/* Draws the y axis of ax between columns x0 and x1: gridlines, ticks,
 * labels (decades on a log axis, with 2..9 minor gridlines when few), the
 * axis line and its rotated title. */
static void draw_y_axis(FILE *out, const axis *ax, double x0, double x1, const char *title)
{
    char num[SVG_NUM_LEN];
    if (ax->scale == SVG_SCALE_LOG10) {
        const int lo = (int)ax->lo, hi = (int)ax->hi, decades = hi - lo;
        if (decades <= LOG_MINOR_MAX_DECADES)
            for (int e = lo; e < hi; e++)
                for (int m = 2; m <= 9; m++) {
                    const double y = axis_y(ax, m * pow(10.0, e));
                    fprintf(out,
                            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                            "stroke=\"" COLOUR_GRID_MINOR "\"/>\n",
                            x0, y, x1, y);
                }
        const int stride = decades + 1 > LOG_MAX_LABELS ? (decades + LOG_MAX_LABELS) / LOG_MAX_LABELS
                                                        : 1;
        for (int e = lo; e <= hi; e++) {
            const double y = axis_y(ax, pow(10.0, e));
            fprintf(out,
                    "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"" COLOUR_GRID
                    "\"/>\n<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"" COLOUR_AXIS
                    "\"/>\n",
                    x0, y, x1, y, x0 - 5, y, x0, y);
            if ((e - lo) % stride == 0)
                put_text(out, x0 - 8, y + 4, "end", FONT_TICK, svg_fmt_num(num, sizeof num, pow(10.0, e)));
        }
    } else {
        const long n = lround((ax->hi - ax->lo) / ax->step);
        for (long k = 0; k <= n; k++) {
            double v = ax->lo + (double)k * ax->step;
            if (fabs(v) < ax->step * 1e-9) v = 0.0;
            if (v > ax->hi + ax->step * 1e-9) break;
            const double y = axis_y(ax, v);
            fprintf(out,
                    "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"" COLOUR_GRID
                    "\"/>\n<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"" COLOUR_AXIS
                    "\"/>\n",
                    x0, y, x1, y, x0 - 5, y, x0, y);
            put_text(out, x0 - 8, y + 4, "end", FONT_TICK, svg_fmt_num(num, sizeof num, v));
        }
    }
    fprintf(out,
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"" COLOUR_AXIS "\"/>\n",
            x0, ax->py_lo, x0, ax->py_hi);
    const double ym = (ax->py_lo + ax->py_hi) / 2;
    fprintf(out, "<text transform=\"translate(%.1f %.1f) rotate(-90)\" text-anchor=\"middle\" "
                 "font-size=\"%d\">",
            x0 - 58, ym, FONT_TITLE);
    svg_put_escaped(out, title);
    fputs("</text>\n", out);
}

/* Draws the x axis line at row y from x0 to x1 with its title centred below. */
static void draw_x_axis(FILE *out, double x0, double x1, double y, const char *title,
                        double title_y)
{
    fprintf(out,
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"" COLOUR_AXIS "\"/>\n",
            x0, y, x1, y);
    put_text(out, (x0 + x1) / 2, title_y, "middle", FONT_TITLE, title);
}

/* Every how many x positions a label fits when n share width px. */
static size_t label_stride(size_t n, double width)
{
    const double max_labels = width / X_LABEL_MIN_GAP;
    if (max_labels < 1.0) return n;
    const size_t stride = (size_t)ceil((double)n / max_labels);
    return stride < 1 ? 1 : stride;
}

/* ---- line chart ----------------------------------------------------------- */

/* Whether series s has a present value at i. */
static int series_present(const svg_series *s, size_t i)
{
    return s->present == NULL || s->present[i] != 0;
}

/* The pixel column of x position i of n across [x0, x1]. */
static double line_x(size_t i, size_t n, double x0, double x1)
{
    if (n <= 1) return (x0 + x1) / 2;
    return x0 + LINE_X_PAD + (double)i * (x1 - x0 - 2 * LINE_X_PAD) / (double)(n - 1);
}

/* Writes the polyline of the points in [from, to) of s that are drawable. */
static void put_segment(FILE *out, const svg_series *s, const axis *ax, size_t from, size_t to,
                        size_t n, double x0, double x1)
{
    if (to - from < 2) return;
    fprintf(out, "<polyline fill=\"none\" stroke-width=\"1.8\" stroke=\"%s\"%s points=\"",
            s->colour, s->dashed ? " stroke-dasharray=\"" LINE_DASH "\"" : "");
    for (size_t i = from; i < to; i++)
        fprintf(out, "%s%.1f,%.1f", i == from ? "" : " ", line_x(i, n, x0, x1), axis_y(ax, s->y[i]));
    fputs("\"/>\n", out);
}

size_t svg_write_line_chart(FILE *out, const svg_line_chart *c)
{
    double dmin = INFINITY, dmax = -INFINITY;
    size_t skipped = 0, drawable = 0;
    for (size_t s = 0; s < c->n_series; s++)
        for (size_t i = 0; i < c->n_x; i++) {
            if (!series_present(&c->series[s], i)) continue;
            const double v = c->series[s].y[i];
            if (!placeable(c->y_scale, v)) {
                skipped++;
                continue;
            }
            drawable++;
            if (v < dmin) dmin = v;
            if (v > dmax) dmax = v;
        }
    const double legend_h = LINE_MARGIN_TOP + LEGEND_ROW * (double)(c->n_series + 1);
    const double height = legend_h > LINE_HEIGHT ? legend_h : LINE_HEIGHT;
    const double x0 = LINE_MARGIN_LEFT, x1 = LINE_WIDTH - LINE_MARGIN_RIGHT;
    const double y_top = LINE_MARGIN_TOP, y_bottom = LINE_HEIGHT - LINE_MARGIN_BOTTOM;
    axis ax;
    axis_init(&ax, c->y_scale, dmin, dmax, c->y_min, c->y_max, y_bottom, y_top);

    open_svg(out, LINE_WIDTH, height, c->title);
    draw_y_axis(out, &ax, x0, x1, c->y_title);
    draw_x_axis(out, x0, x1, y_bottom, c->x_title, LINE_HEIGHT - 10);
    const size_t stride = label_stride(c->n_x, x1 - x0 - 2 * LINE_X_PAD);
    for (size_t i = 0; i < c->n_x; i++) {
        const double x = line_x(i, c->n_x, x0, x1);
        fprintf(out,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"" COLOUR_AXIS "\"/>\n",
                x, y_bottom, x, y_bottom + 4);
        if (i % stride == 0) put_text(out, x, y_bottom + 17, "middle", FONT_TICK, c->x_labels[i]);
    }
    if (drawable == 0)
        fprintf(out,
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"%d\" fill=\"" COLOUR_CAPTION
                "\">no finite values to plot</text>\n",
                (x0 + x1) / 2, (y_top + y_bottom) / 2, FONT_TITLE);

    const double r = c->n_x > MARKER_CROWDED_N ? MARKER_R_SMALL : MARKER_R;
    char num[SVG_NUM_LEN];
    for (size_t s = 0; s < c->n_series; s++) {
        const svg_series *se = &c->series[s];
        size_t from = 0;
        for (size_t i = 0; i <= c->n_x; i++) {
            const int ok = i < c->n_x && series_present(se, i) && placeable(c->y_scale, se->y[i]);
            if (!ok) {
                put_segment(out, se, &ax, from, i, c->n_x, x0, x1);
                from = i + 1;
            }
        }
        for (size_t i = 0; i < c->n_x; i++) {
            if (!series_present(se, i) || !placeable(c->y_scale, se->y[i])) continue;
            fprintf(out, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%.1f\" fill=\"%s\"><title>",
                    line_x(i, c->n_x, x0, x1), axis_y(&ax, se->y[i]), r, se->colour);
            svg_put_escaped(out, se->name);
            fputs(", ", out);
            svg_put_escaped(out, c->x_title);
            fputc(' ', out);
            svg_put_escaped(out, c->x_labels[i]);
            fprintf(out, ": %s</title></circle>\n", svg_fmt_num(num, sizeof num, se->y[i]));
        }
        const double ly = y_top + 8 + LEGEND_ROW * (double)s, lx = x1 + LEGEND_GAP;
        fprintf(out,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke-width=\"2.5\" "
                "stroke=\"%s\"%s/>\n",
                lx, ly, lx + LEGEND_SWATCH, ly, se->colour,
                se->dashed ? " stroke-dasharray=\"" LINE_DASH "\"" : "");
        put_text(out, lx + LEGEND_SWATCH + 6, ly + 4, "start", FONT_TICK, se->name);
    }
    fputs("</svg>\n", out);
    return skipped;
}

/* ---- heatmap -------------------------------------------------------------- */

/* Writes into buf (>= 8 bytes) the viridis colour at t in [0, 1] as "#rrggbb". */
static void viridis(double t, char *buf, size_t len)
{
    if (!(t >= 0.0)) t = 0.0;
    if (t > 1.0) t = 1.0;
    const double pos = t * (double)(VIRIDIS_N - 1);
    size_t k = (size_t)pos;
    if (k >= VIRIDIS_N - 1) k = VIRIDIS_N - 2;
    const double f = pos - (double)k;
    int rgb[3];
    for (int j = 0; j < 3; j++)
        rgb[j] = (int)lround(VIRIDIS[k][j] + f * (VIRIDIS[k + 1][j] - VIRIDIS[k][j]));
    snprintf(buf, len, "#%02x%02x%02x", rgb[0], rgb[1], rgb[2]);
}

/* Writes a legend swatch with its caption at (x, y); returns the next x. */
static double put_swatch(FILE *out, double x, double y, const char *colour, const char *caption)
{
    fprintf(out,
            "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\" "
            "stroke=\"#999999\"/>\n",
            x, y, HEAT_BAR_H, HEAT_BAR_H, colour);
    put_text(out, x + HEAT_BAR_H + 5, y + HEAT_BAR_H - 2, "start", FONT_TICK, caption);
    return x + HEAT_BAR_H + 5 + 7.0 * (double)strlen(caption) + 18;
}

size_t svg_write_heatmap(FILE *out, const svg_heatmap *h)
{
    const size_t n = h->n_rows * h->n_cols;
    double dmin = INFINITY, dmax = -INFINITY;
    size_t off = 0, n_missing = 0, n_zero = 0, n_nonfinite = 0;
    for (size_t i = 0; i < n; i++) {
        if (h->present != NULL && !h->present[i]) {
            n_missing++;
            continue;
        }
        const double v = h->values[i];
        if (!placeable(SVG_SCALE_LOG10, v)) {
            off++;
            if (isfinite(v)) n_zero++;
            else n_nonfinite++;
            continue;
        }
        if (v < dmin) dmin = v;
        if (v > dmax) dmax = v;
    }
    const int have_scale = dmin <= dmax;
    double lo = have_scale ? log10(dmin) : LOG_EMPTY_LO, hi = have_scale ? log10(dmax) : LOG_EMPTY_HI;
    if (hi - lo < HEAT_MIN_LOG_SPAN) {
        lo -= 0.5;
        hi += 0.5;
    }
    double cell_w = HEAT_PLOT_MAX_W / (double)h->n_cols;
    if (cell_w > HEAT_CELL_MAX_W) cell_w = HEAT_CELL_MAX_W;
    if (cell_w < HEAT_CELL_MIN_W) cell_w = HEAT_CELL_MIN_W;
    const double x0 = HEAT_MARGIN_LEFT, y0 = HEAT_MARGIN_TOP;
    const double plot_w = cell_w * (double)h->n_cols, plot_h = HEAT_CELL_H * (double)h->n_rows;
    double width = x0 + plot_w + HEAT_MARGIN_RIGHT;
    if (width < HEAT_MIN_WIDTH) width = HEAT_MIN_WIDTH;
    const double height = y0 + plot_h + HEAT_AXIS_BAND + HEAT_LEGEND_BAND;

    open_svg(out, width, height, h->title);
    char colour[16], num[SVG_NUM_LEN], idx[24];
    for (size_t r = 0; r < h->n_rows; r++) {
        const double y = y0 + HEAT_CELL_H * (double)r;
        put_text(out, x0 - 8, y + HEAT_CELL_H / 2 + 4, "end", FONT_TICK, h->row_labels[r]);
        for (size_t col = 0; col < h->n_cols; col++) {
            const size_t i = r * h->n_cols + col;
            const int present = h->present == NULL || h->present[i];
            const double v = h->values[i];
            if (!present) snprintf(colour, sizeof colour, HEAT_COLOUR_MISSING);
            else if (!isfinite(v)) snprintf(colour, sizeof colour, HEAT_COLOUR_NONFINITE);
            else if (v <= 0) snprintf(colour, sizeof colour, HEAT_COLOUR_ZERO);
            else viridis((log10(v) - lo) / (hi - lo), colour, sizeof colour);
            fprintf(out,
                    "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\"><title>",
                    x0 + cell_w * (double)col, y, cell_w, HEAT_CELL_H, colour);
            svg_put_escaped(out, h->row_labels[r]);
            fputs(", ", out);
            svg_put_escaped(out, h->x_title);
            fprintf(out, " %zu: ", col);
            svg_put_escaped(out, h->value_name);
            fprintf(out, " %s</title></rect>\n",
                    present ? svg_fmt_num(num, sizeof num, v) : "no data");
        }
    }
    fprintf(out,
            "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"none\" "
            "stroke=\"" COLOUR_AXIS "\"/>\n",
            x0, y0, plot_w, plot_h);
    const size_t stride = label_stride(h->n_cols, plot_w);
    for (size_t col = 0; col < h->n_cols; col += stride) {
        snprintf(idx, sizeof idx, "%zu", col);
        put_text(out, x0 + cell_w * ((double)col + 0.5), y0 + plot_h + 14, "middle", FONT_TICK, idx);
    }
    put_text(out, x0 + plot_w / 2, y0 + plot_h + 32, "middle", FONT_TITLE, h->x_title);

    /* Colour bar: log10 from lo to hi, decade ticks inside, the extremes labelled. */
    const double by = y0 + plot_h + HEAT_AXIS_BAND, bx = x0;
    const double step_w = HEAT_BAR_W / HEAT_BAR_STEPS;
    for (int k = 0; k < HEAT_BAR_STEPS; k++) {
        viridis(((double)k + 0.5) / HEAT_BAR_STEPS, colour, sizeof colour);
        fprintf(out, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\"/>\n",
                bx + step_w * k, by, step_w + 0.3, HEAT_BAR_H, colour);
    }
    fprintf(out,
            "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
            "stroke=\"#999999\"/>\n",
            bx, by, HEAT_BAR_W, HEAT_BAR_H);
    for (double e = ceil(lo); e <= floor(hi); e += 1.0) {
        const double x = bx + HEAT_BAR_W * (e - lo) / (hi - lo);
        fprintf(out,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"" COLOUR_AXIS "\"/>\n",
                x, by + HEAT_BAR_H, x, by + HEAT_BAR_H + 4);
        put_text(out, x, by + HEAT_BAR_H + 16, "middle", FONT_TICK,
                 svg_fmt_num(num, sizeof num, pow(10.0, e)));
    }
    if (have_scale) {
        put_text(out, bx, by - 4, "start", FONT_TICK, svg_fmt_num(num, sizeof num, dmin));
        put_text(out, bx + HEAT_BAR_W, by - 4, "end", FONT_TICK, svg_fmt_num(num, sizeof num, dmax));
    }
    char caption[64];
    snprintf(caption, sizeof caption, "%s (log scale)", h->value_name != NULL ? h->value_name : "");
    double sx = bx + HEAT_BAR_W + 14;
    put_text(out, sx, by + HEAT_BAR_H - 2, "start", FONT_TICK, caption);
    sx += 7.0 * (double)strlen(caption) + 14;
    if (n_missing > 0) sx = put_swatch(out, sx, by, HEAT_COLOUR_MISSING, "no data");
    if (n_zero > 0) sx = put_swatch(out, sx, by, HEAT_COLOUR_ZERO, "0");
    if (n_nonfinite > 0) put_swatch(out, sx, by, HEAT_COLOUR_NONFINITE, "NaN/inf");
    fputs("</svg>\n", out);
    return off;
}

/* ---- error bars ----------------------------------------------------------- */

size_t svg_write_error_bars(FILE *out, const svg_error_bars *c)
{
    double dmin = INFINITY, dmax = -INFINITY;
    size_t skipped = 0;
    for (size_t i = 0; i < c->n_items; i++) {
        const svg_interval *it = &c->items[i];
        if (!isfinite(it->value)) {
            skipped++;
            continue;
        }
        const double vals[3] = {it->value, it->low, it->high};
        for (int j = 0; j < 3; j++) {
            if (!isfinite(vals[j])) continue;
            if (vals[j] < dmin) dmin = vals[j];
            if (vals[j] > dmax) dmax = vals[j];
        }
    }
    double width = BARS_MARGIN_LEFT + BARS_MARGIN_RIGHT + BARS_SLOT_MIN * (double)c->n_items;
    if (width < BARS_MIN_WIDTH) width = BARS_MIN_WIDTH;
    if (width > BARS_MAX_WIDTH) width = BARS_MAX_WIDTH;
    const double x0 = BARS_MARGIN_LEFT, x1 = width - BARS_MARGIN_RIGHT;
    const double y_top = BARS_MARGIN_TOP, y_bottom = BARS_HEIGHT - BARS_MARGIN_BOTTOM;
    axis ax;
    axis_init(&ax, SVG_SCALE_LINEAR, dmin, dmax, c->y_min, c->y_max, y_bottom, y_top);
    /* A fixed range must still hold every interval: widen it to the data. */
    if (dmin <= dmax && (dmin < ax.lo || dmax > ax.hi))
        axis_init(&ax, SVG_SCALE_LINEAR, fmin(dmin, ax.lo), fmax(dmax, ax.hi), NAN, NAN, y_bottom,
                  y_top);

    open_svg(out, width, BARS_HEIGHT, c->title);
    draw_y_axis(out, &ax, x0, x1, c->y_title);
    fprintf(out,
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"" COLOUR_AXIS "\"/>\n",
            x0, y_bottom, x1, y_bottom);
    const double slot = (x1 - x0) / (double)c->n_items;
    char num[SVG_NUM_LEN], lo_s[SVG_NUM_LEN], hi_s[SVG_NUM_LEN];
    for (size_t i = 0; i < c->n_items; i++) {
        const svg_interval *it = &c->items[i];
        const double x = x0 + slot * ((double)i + 0.5);
        fprintf(out,
                "<text transform=\"translate(%.1f %.1f) rotate(%d)\" text-anchor=\"end\" "
                "font-size=\"%d\">",
                x + 4, y_bottom + 14, LABEL_ROTATE_DEG, FONT_TICK);
        svg_put_escaped(out, it->label);
        fputs("</text>\n", out);
        if (!isfinite(it->value)) continue;
        fputs("<g><title>", out);
        svg_put_escaped(out, it->label);
        fprintf(out, ": %s [%s, %s]</title>\n", svg_fmt_num(num, sizeof num, it->value),
                svg_fmt_num(lo_s, sizeof lo_s, it->low), svg_fmt_num(hi_s, sizeof hi_s, it->high));
        if (isfinite(it->low) && isfinite(it->high)) {
            const double yl = axis_y(&ax, it->low), yh = axis_y(&ax, it->high);
            fprintf(out,
                    "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                    "stroke-width=\"2\"/>\n"
                    "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                    "stroke-width=\"2\"/>\n"
                    "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                    "stroke-width=\"2\"/>\n",
                    x, yl, x, yh, it->colour, x - BARS_CAP, yl, x + BARS_CAP, yl, it->colour,
                    x - BARS_CAP, yh, x + BARS_CAP, yh, it->colour);
        }
        fprintf(out, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%.1f\" fill=\"%s\"/>\n</g>\n", x,
                axis_y(&ax, it->value), BARS_MARKER_R, it->colour);
    }
    fputs("</svg>\n", out);
    return skipped;
}

/* ---- stacked bars --------------------------------------------------------- */

/* Share of an x slot the stack and the bar beside it take together. */
#define STACK_FILL 0.7
/* The tick's overhang on each side of the stack, in pixels. */
#define STACK_TICK_OVERHANG 3.0

/* Whether v can be a bar on a linear axis from 0 (NaN: absent, not skipped). */
static int stack_placeable(double v)
{
    return isfinite(v) && v >= 0;
}

/* Writes one bar rect [y_lo, y_hi] at column x, width w, with hover text
 * "name, x_title label: value". */
static void put_bar(FILE *out, double x, double w, double y_lo, double y_hi, const char *colour,
                    const char *name, const char *x_title, const char *label, double value)
{
    char num[SVG_NUM_LEN];
    fprintf(out, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\">"
                 "<title>", x, y_hi, w, y_lo - y_hi, colour);
    svg_put_escaped(out, name);
    fputs(", ", out);
    svg_put_escaped(out, x_title);
    fputc(' ', out);
    svg_put_escaped(out, label);
    fprintf(out, ": %s</title></rect>\n", svg_fmt_num(num, sizeof num, value));
}

/* Draws one legend row at row r: a swatch of colour (a line when line). */
static void put_legend_row(FILE *out, double lx, double y_top, size_t r, const char *colour,
                           int line, const char *name)
{
    const double ly = y_top + 8 + LEGEND_ROW * (double)r;
    if (line)
        fprintf(out, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                     "stroke-width=\"2.5\" stroke=\"%s\"/>\n", lx, ly, lx + LEGEND_SWATCH, ly,
                colour);
    else
        fprintf(out, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"10\" "
                     "fill=\"%s\"/>\n", lx, ly - 5, LEGEND_SWATCH, colour);
    put_text(out, lx + LEGEND_SWATCH + 6, ly + 4, "start", FONT_TICK, name);
}

size_t svg_write_stacked_bars(FILE *out, const svg_stacked_bars *c)
{
    size_t skipped = 0;
    double dmax = 0;
    for (size_t i = 0; i < c->n_x; i++) {
        double sum = 0;
        for (size_t j = 0; j < c->n_parts; j++) {
            const double v = c->parts[i * c->n_parts + j];
            if (isnan(v)) continue;
            if (!stack_placeable(v)) skipped++;
            else sum += v;
        }
        const double extra[2] = {c->beside[i], c->tick != NULL ? c->tick[i] : NAN};
        for (int e = 0; e < 2; e++) {
            if (isnan(extra[e])) continue;
            if (!stack_placeable(extra[e])) skipped++;
            else if (extra[e] > dmax) dmax = extra[e];
        }
        if (sum > dmax) dmax = sum;
    }
    const double x0 = LINE_MARGIN_LEFT, x1 = LINE_WIDTH - LINE_MARGIN_RIGHT;
    const double y_top = LINE_MARGIN_TOP, y_bottom = LINE_HEIGHT - LINE_MARGIN_BOTTOM;
    axis ax;
    axis_init(&ax, SVG_SCALE_LINEAR, 0.0, dmax > 0 ? dmax : 1.0, NAN, NAN, y_bottom, y_top);
    open_svg(out, LINE_WIDTH, LINE_HEIGHT, c->title);
    draw_y_axis(out, &ax, x0, x1, c->y_title);
    draw_x_axis(out, x0, x1, y_bottom, c->x_title, LINE_HEIGHT - 14);
    const double slot = (x1 - x0) / (double)c->n_x;
    const double w = slot * STACK_FILL / 2;
    const size_t stride = label_stride(c->n_x, x1 - x0);
    for (size_t i = 0; i < c->n_x; i++) {
        const double xs = x0 + slot * (double)i + slot * (1 - STACK_FILL) / 2;
        if (i % stride == 0)
            put_text(out, xs + w, y_bottom + 16, "middle", FONT_TICK, c->x_labels[i]);
        double at = 0;
        for (size_t j = 0; j < c->n_parts; j++) {
            const double v = c->parts[i * c->n_parts + j];
            if (!stack_placeable(v)) continue;
            put_bar(out, xs, w, axis_y(&ax, at), axis_y(&ax, at + v), c->part_colours[j],
                    c->part_names[j], c->x_title, c->x_labels[i], v);
            at += v;
        }
        if (at > 0) {
            char num[SVG_NUM_LEN];
            fprintf(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" "
                         "font-size=\"%d\">sum %s</text>\n", xs + w / 2, axis_y(&ax, at) - 3,
                    FONT_TICK - 2, svg_fmt_num(num, sizeof num, at));
        }
        if (stack_placeable(c->beside[i]))
            put_bar(out, xs + w, w, axis_y(&ax, 0), axis_y(&ax, c->beside[i]), c->beside_colour,
                    c->beside_name, c->x_title, c->x_labels[i], c->beside[i]);
        if (c->tick != NULL && stack_placeable(c->tick[i])) {
            const double y = axis_y(&ax, c->tick[i]);
            fprintf(out, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                         "stroke-width=\"2.5\" stroke=\"" COLOUR_AXIS "\"><title>",
                    xs - STACK_TICK_OVERHANG, y, xs + w + STACK_TICK_OVERHANG, y);
            svg_put_escaped(out, c->tick_name);
            char num[SVG_NUM_LEN];
            fprintf(out, ": %s</title></line>\n", svg_fmt_num(num, sizeof num, c->tick[i]));
        }
    }
    const double lx = x1 + LEGEND_GAP;
    size_t r = 0;
    for (size_t j = 0; j < c->n_parts; j++)
        put_legend_row(out, lx, y_top, r++, c->part_colours[j], 0, c->part_names[j]);
    put_legend_row(out, lx, y_top, r++, c->beside_colour, 0, c->beside_name);
    if (c->tick != NULL) put_legend_row(out, lx, y_top, r++, COLOUR_AXIS, 1, c->tick_name);
    fputs("</svg>\n", out);
    return skipped;
}
