/*
 * svg.h: inline SVG charts for the HTML report (reports/report_html.h), and
 * the two text primitives every report format shares (number formatting and
 * HTML escaping).
 *
 * Every chart is written as one <svg> element meant to sit inside an HTML5
 * page: no xmlns attribute (HTML5 does not need one, and the report holds no
 * URL), no script, no external reference; hover text is a plain <title>.
 * All caller text (titles, labels, series names) is escaped on output.
 * Numbers are printed with svg_fmt_num. A value the chart cannot place
 * (non-finite, or <= 0 on a log axis) is skipped, never drawn at a made-up
 * position; each writer returns how many it skipped so the caller can say
 * so. Output errors are not reported here: the caller checks ferror(out).
 */
#ifndef PG_SVG_H
#define PG_SVG_H

#include <stddef.h>
#include <stdio.h>

/* Size of a buffer that holds any svg_fmt_num result. */
#define SVG_NUM_LEN 32

/* Formats v with "%.3g", or as "NaN", "inf" or "-inf" when it is not
 * finite, into buf (len >= SVG_NUM_LEN); returns buf. */
const char *svg_fmt_num(char *buf, size_t len, double v);

/* Writes s to out with & < > " ' replaced by &amp; &lt; &gt; &quot; &#39;
 * (safe in element content and in quoted attributes), and each byte that is
 * not valid UTF-8 and each control character other than tab, newline and
 * carriage return as '?' (utf8_markup_len, as the JUnit report does); NULL
 * writes nothing. */
void svg_put_escaped(FILE *out, const char *s);

/* How a y axis (or a colour scale) maps values. */
typedef enum svg_scale {
    SVG_SCALE_LINEAR,   /* even steps; range from the data or fixed */
    SVG_SCALE_LOG10     /* decades; values <= 0 cannot be placed */
} svg_scale;

/* One line of a line chart. */
typedef struct svg_series {
    const char *name;              /* legend and hover text */
    const char *colour;            /* a CSS colour literal of the caller's, e.g. "#1f77b4" */
    const double *y;               /* n_x values, one per x position */
    const unsigned char *present;  /* n_x flags, 0 = no data there (not counted as
                                      skipped); NULL = every value present */
    int dashed;                    /* 1: a dashed line (a reference such as a noise
                                      floor), in the legend too; 0: solid */
} svg_series;

/* A line chart over categorical x positions (layers, runs). */
typedef struct svg_line_chart {
    const char *title;              /* accessible name of the chart */
    const char *x_title, *y_title;  /* axis titles */
    size_t n_x;                     /* x positions, >= 1 */
    const char *const *x_labels;    /* n_x tick labels (thinned out when crowded) */
    const svg_series *series;
    size_t n_series;
    svg_scale y_scale;
    double y_min, y_max;            /* linear only: a fixed range; NaN = from the data */
} svg_line_chart;

/* Writes c as an <svg> line chart: decade ticks and labels on a log axis,
 * one polyline per series broken where a value is missing or skipped, a
 * marker with hover text per point, a legend. Returns how many present
 * values were skipped (non-finite, or <= 0 on a log axis); a chart with no
 * drawable value still gets its axes and a "no finite values" caption. */
size_t svg_write_line_chart(FILE *out, const svg_line_chart *c);

/* A grid of coloured cells (rows: e.g. layers, columns: e.g. heads). */
typedef struct svg_heatmap {
    const char *title;               /* accessible name of the chart */
    const char *x_title;             /* what the columns are ("head") */
    const char *value_name;          /* what the colour is ("rel_l2"), for hover text */
    size_t n_rows, n_cols;           /* each >= 1 */
    const char *const *row_labels;   /* n_rows labels */
    const double *values;            /* n_rows * n_cols, row-major */
    const unsigned char *present;    /* n_rows * n_cols, 0 = no data; NULL = all present */
} svg_heatmap;

/* Writes h as an <svg> heatmap on a log10 colour scale spanning the finite
 * positive values, with a colour-bar legend (decade ticks, the extremes) and
 * swatches for the cells off the scale: "no data", "0" and "NaN/inf".
 * Returns how many present cells were off the scale (non-finite or <= 0). */
size_t svg_write_heatmap(FILE *out, const svg_heatmap *h);

/* One estimate with its interval. */
typedef struct svg_interval {
    const char *label;    /* x-axis label */
    const char *colour;   /* CSS colour literal of the caller's */
    double value;         /* the point; non-finite = skipped */
    double low, high;     /* the interval; either non-finite = the point alone */
} svg_interval;

/* Points with error bars over categorical x positions, on a linear y axis. */
typedef struct svg_error_bars {
    const char *title;              /* accessible name of the chart */
    const char *y_title;
    const svg_interval *items;
    size_t n_items;                 /* >= 1 */
    double y_min, y_max;            /* fixed range; NaN = from the data */
} svg_error_bars;

/* Writes c as an <svg> chart of points with vertical interval bars and caps.
 * Returns how many items were skipped (a non-finite value). */
size_t svg_write_error_bars(FILE *out, const svg_error_bars *c);

/* Stacked bars over categorical x positions (layers), on a linear y axis
 * from 0, each with a second bar beside it and an optional tick across the
 * stack: e.g. the single-tensor errors stacked, the joint error beside
 * their sum, the root-sum-square as the tick. */
typedef struct svg_stacked_bars {
    const char *title;                 /* accessible name of the chart */
    const char *x_title, *y_title;     /* axis titles */
    size_t n_x;                        /* x positions, >= 1 */
    const char *const *x_labels;       /* n_x tick labels (thinned out when crowded) */
    size_t n_parts;                    /* segments of a stack, >= 1 */
    const char *const *part_names;     /* n_parts legend and hover names */
    const char *const *part_colours;   /* n_parts CSS colour literals */
    const double *parts;               /* [i * n_parts + j]; NaN = no segment there */
    const char *beside_name;           /* legend name of the bar beside each stack */
    const char *beside_colour;
    const double *beside;              /* n_x values; NaN = none there */
    const char *tick_name;             /* legend name of the tick; NULL with tick */
    const double *tick;                /* n_x values or NULL (no ticks); NaN = none there */
} svg_stacked_bars;

/* Writes c as an <svg> chart: per x position a stack of its finite
 * non-negative parts (bottom first, in part order) with hover text naming
 * each part and the stack's sum, the beside bar to its right, the tick
 * across the stack, a legend. The axis spans 0 .. the largest sum, beside
 * or tick value. Returns how many values were skipped (present but
 * negative or infinite: not placeable on a finite linear axis). */
size_t svg_write_stacked_bars(FILE *out, const svg_stacked_bars *c);

#endif /* PG_SVG_H */
