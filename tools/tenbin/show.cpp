// tenbin show: the image-like tensors of a file or of received messages as
// a grid of pictures in a PNG, captioned (tensorcom's tensorshow).
#include "common.hpp"
#include "interrupt.hpp"
#include "sockets.hpp"

#include <tenbin/connect.hpp>

#if TENBIN_TOOL_PNG
#include <png.h>
#endif

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

namespace tenbin::cli {
namespace {

struct show_cli_options {
    std::string source;
    std::string out;
    std::size_t count = 1;
    std::size_t columns = 8;
    std::size_t max_images = 64;
    double timeout = 30;
    socket_choice socket;
};

// ---- a 5x7 bitmap font: digits, letters of both cases and the punctuation
// of captions; each row's low 5 bits, leftmost highest.
struct glyph {
    char c;
    std::array<std::uint8_t, 7> rows;
};
constexpr glyph font[] = {
    {'0', {0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E}}, {'1', {0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E}},
    {'2', {0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F}}, {'3', {0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E}},
    {'4', {0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02}}, {'5', {0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E}},
    {'6', {0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E}}, {'7', {0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08}},
    {'8', {0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E}}, {'9', {0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C}},
    {'A', {0x0E, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11}}, {'B', {0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E}},
    {'C', {0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E}}, {'D', {0x1C, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1C}},
    {'E', {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F}}, {'F', {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10}},
    {'G', {0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F}}, {'H', {0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11}},
    {'I', {0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E}}, {'J', {0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C}},
    {'K', {0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11}}, {'L', {0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F}},
    {'M', {0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11}}, {'N', {0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11}},
    {'O', {0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}}, {'P', {0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10}},
    {'Q', {0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D}}, {'R', {0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11}},
    {'S', {0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E}}, {'T', {0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04}},
    {'U', {0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}}, {'V', {0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04}},
    {'W', {0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A}}, {'X', {0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11}},
    {'Y', {0x11, 0x11, 0x11, 0x0A, 0x04, 0x04, 0x04}}, {'Z', {0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F}},
    {'a', {0x00, 0x00, 0x0E, 0x01, 0x0F, 0x11, 0x0F}}, {'b', {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x1E}},
    {'c', {0x00, 0x00, 0x0E, 0x10, 0x10, 0x11, 0x0E}}, {'d', {0x01, 0x01, 0x0D, 0x13, 0x11, 0x11, 0x0F}},
    {'e', {0x00, 0x00, 0x0E, 0x11, 0x1F, 0x10, 0x0E}}, {'f', {0x06, 0x09, 0x08, 0x1C, 0x08, 0x08, 0x08}},
    {'g', {0x00, 0x0F, 0x11, 0x11, 0x0F, 0x01, 0x0E}}, {'h', {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x11}},
    {'i', {0x04, 0x00, 0x0C, 0x04, 0x04, 0x04, 0x0E}}, {'j', {0x02, 0x00, 0x06, 0x02, 0x02, 0x12, 0x0C}},
    {'k', {0x10, 0x10, 0x12, 0x14, 0x18, 0x14, 0x12}}, {'l', {0x0C, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E}},
    {'m', {0x00, 0x00, 0x1A, 0x15, 0x15, 0x11, 0x11}}, {'n', {0x00, 0x00, 0x16, 0x19, 0x11, 0x11, 0x11}},
    {'o', {0x00, 0x00, 0x0E, 0x11, 0x11, 0x11, 0x0E}}, {'p', {0x00, 0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10}},
    {'q', {0x00, 0x0F, 0x11, 0x11, 0x0F, 0x01, 0x01}}, {'r', {0x00, 0x00, 0x16, 0x19, 0x10, 0x10, 0x10}},
    {'s', {0x00, 0x00, 0x0E, 0x10, 0x0E, 0x01, 0x1E}}, {'t', {0x08, 0x08, 0x1C, 0x08, 0x08, 0x09, 0x06}},
    {'u', {0x00, 0x00, 0x11, 0x11, 0x11, 0x13, 0x0D}}, {'v', {0x00, 0x00, 0x11, 0x11, 0x11, 0x0A, 0x04}},
    {'w', {0x00, 0x00, 0x11, 0x11, 0x15, 0x15, 0x0A}}, {'x', {0x00, 0x00, 0x11, 0x0A, 0x04, 0x0A, 0x11}},
    {'y', {0x00, 0x11, 0x11, 0x11, 0x0F, 0x01, 0x0E}}, {'z', {0x00, 0x00, 0x1F, 0x02, 0x04, 0x08, 0x1F}},
    {' ', {0, 0, 0, 0, 0, 0, 0}},                      {'[', {0x0E, 0x08, 0x08, 0x08, 0x08, 0x08, 0x0E}},
    {']', {0x0E, 0x02, 0x02, 0x02, 0x02, 0x02, 0x0E}}, {',', {0, 0, 0, 0, 0x0C, 0x04, 0x08}},
    {'.', {0, 0, 0, 0, 0, 0x0C, 0x0C}},                {'-', {0, 0, 0, 0x1F, 0, 0, 0}},
    {'_', {0, 0, 0, 0, 0, 0, 0x1F}},                   {'#', {0x0A, 0x0A, 0x1F, 0x0A, 0x1F, 0x0A, 0x0A}},
    {':', {0, 0x0C, 0x0C, 0, 0x0C, 0x0C, 0}},          {'=', {0, 0, 0x1F, 0, 0x1F, 0, 0}},
    {'(', {0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02}}, {')', {0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08}},
    {'/', {0, 0x01, 0x02, 0x04, 0x08, 0x10, 0}},       {'\\', {0, 0x10, 0x08, 0x04, 0x02, 0x01, 0}},
    {'+', {0, 0x04, 0x04, 0x1F, 0x04, 0x04, 0}},       {'*', {0, 0x04, 0x15, 0x0E, 0x15, 0x04, 0}},
    {'!', {0x04, 0x04, 0x04, 0x04, 0x04, 0, 0x04}},    {'?', {0x0E, 0x11, 0x01, 0x02, 0x04, 0, 0x04}},
    {'\'', {0x04, 0x04, 0x08, 0, 0, 0, 0}},            {'"', {0x0A, 0x0A, 0, 0, 0, 0, 0}},
    {';', {0, 0x0C, 0x0C, 0, 0x0C, 0x04, 0x08}},       {'<', {0x02, 0x04, 0x08, 0x10, 0x08, 0x04, 0x02}},
    {'>', {0x08, 0x04, 0x02, 0x01, 0x02, 0x04, 0x08}}, {'%', {0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03}},
    {'&', {0x0C, 0x12, 0x14, 0x08, 0x15, 0x12, 0x0D}}, {'@', {0x0E, 0x11, 0x17, 0x15, 0x17, 0x10, 0x0F}},
    {'~', {0, 0, 0x08, 0x15, 0x02, 0, 0}},             {'|', {0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04}},
    {'{', {0x02, 0x04, 0x04, 0x08, 0x04, 0x04, 0x02}}, {'}', {0x08, 0x04, 0x04, 0x02, 0x04, 0x04, 0x08}},
    {'$', {0x04, 0x0F, 0x14, 0x0E, 0x05, 0x1E, 0x04}}, {'^', {0x04, 0x0A, 0x11, 0, 0, 0, 0}},
    {'`', {0x08, 0x04, 0x02, 0, 0, 0, 0}},
};
// Anything else (a byte of UTF-8, a control character): a box.
constexpr std::array<std::uint8_t, 7> unknown_glyph{0x1F, 0x11, 0x11, 0x11, 0x11, 0x11, 0x1F};

// Layout, in pixels: a character cell, a caption line, the gap between cells.
constexpr std::size_t char_w = 6, line_h = 9, pad = 4, min_cell_w = 16 * char_w;
// Small images are enlarged to about this many pixels a side.
constexpr std::size_t target_side = 64;
// No picture larger than this a side.
constexpr std::size_t max_side = 16384;

struct canvas {
    std::size_t width = 0, height = 0;
    std::vector<std::uint8_t> rgb;  // white
    canvas(std::size_t w, std::size_t h) : width(w), height(h), rgb(w * h * 3, 255) {}
    void set(std::size_t x, std::size_t y, std::uint8_t r, std::uint8_t g, std::uint8_t b) {
        if (x >= width || y >= height) return;
        std::uint8_t* p = &rgb[(y * width + x) * 3];
        p[0] = r;
        p[1] = g;
        p[2] = b;
    }
    // `text` from (x, y), as it is.
    void write(std::size_t x, std::size_t y, std::string_view text) {
        for (std::size_t i = 0; i < text.size(); ++i) {
            const char c = text[i];
            const auto* g = std::find_if(std::begin(font), std::end(font), [&](const glyph& f) { return f.c == c; });
            const auto& rows = g != std::end(font) ? g->rows : unknown_glyph;
            for (std::size_t r = 0; r < 7; ++r)
                for (std::size_t b = 0; b < 5; ++b)
                    if (rows[r] & (0x10 >> b)) set(x + i * char_w + b, y + r, 0, 0, 0);
        }
    }
};

// One picture: a tensor (or one item of a batch) read as H x W x C.
struct picture {
    const tensor* t = nullptr;
    std::size_t first = 0;           // element index of pixel (0, 0), channel 0
    std::size_t h = 0, w = 0, c = 1;  // c: 1, 3 or 4
    std::size_t sy = 0, sx = 0, sc = 0;  // element strides
    std::string caption[2];  // where it is and its info; dtype and shape
};

// `text` in lines of at most `width` characters, each broken after the last
// space that fits (a shape's ", ") or, with none, cut: nothing is left out.
std::vector<std::string> wrapped(std::string_view text, std::size_t width) {
    std::vector<std::string> lines;
    while (text.size() > width) {
        std::size_t cut = text.rfind(' ', width);
        cut = cut == std::string_view::npos || cut == 0 ? width : cut + 1;
        std::string_view line = text.substr(0, cut);
        while (!line.empty() && line.back() == ' ') line.remove_suffix(1);
        lines.emplace_back(line);
        text.remove_prefix(cut);
    }
    lines.emplace_back(text);
    return lines;
}

double value_at(const tensor& t, std::size_t i) {
    const std::byte* p = t.data().data() + i * itemsize(t.dtype());
    switch (t.dtype()) {
    case dtype::u1: return static_cast<double>(static_cast<std::uint8_t>(*p));
    case dtype::f2: {
        float16 v;
        std::memcpy(&v, p, 2);
        return v.to_float();
    }
    case dtype::f4: {
        float v;
        std::memcpy(&v, p, 4);
        return v;
    }
    case dtype::f8: {
        double v;
        std::memcpy(&v, p, 8);
        return v;
    }
    default: return 0;
    }
}

bool is_channels(std::int64_t d) { return d == 1 || d == 3 || d == 4; }

// Whether `t` is image-like: H x W, H x W x C, C x H x W, N x H x W x C,
// N x C x H x W (channels last wins a tie). If so, adds its first `wanted`
// pictures to `out`, and nothing for the items past them: a batch of
// millions costs what the pictures drawn cost.
bool pictures_of(const tensor& t, const std::string& where, std::size_t wanted, std::vector<picture>& out) {
    const bool pixels = t.dtype() == dtype::u1 || is_float(t.dtype());
    const shape_t& s = t.shape();
    if (!pixels || s.size() < 2 || s.size() > 4 || t.count() == 0) return false;
    std::size_t n = 1;
    picture p;
    p.t = &t;
    const auto dims = [&](std::int64_t h, std::int64_t w, std::int64_t c, bool last) {
        p.h = static_cast<std::size_t>(h);
        p.w = static_cast<std::size_t>(w);
        p.c = static_cast<std::size_t>(c);
        p.sc = last ? 1 : p.h * p.w;
        p.sx = last ? p.c : 1;
        p.sy = p.sx * p.w;
    };
    if (s.size() == 2) {
        dims(s[0], s[1], 1, true);
    } else if (s.size() == 3) {
        if (is_channels(s[2])) dims(s[0], s[1], s[2], true);
        else if (is_channels(s[0])) dims(s[1], s[2], s[0], false);
        else return false;
    } else {
        n = static_cast<std::size_t>(s[0]);
        if (is_channels(s[3])) dims(s[1], s[2], s[3], true);
        else if (is_channels(s[1])) dims(s[2], s[3], s[1], false);
        else return false;
    }
    if (p.h > max_side || p.w > max_side) return false;
    const std::string info = t.info().empty() ? "-" : std::string(t.info());
    for (std::size_t i = 0; i < std::min(n, wanted); ++i) {
        picture one = p;
        one.first = i * p.h * p.w * p.c;
        one.caption[0] = where + " " + info + (n > 1 ? " #" + std::to_string(i) : "");
        one.caption[1] = std::string(code(t.dtype())) + " " + shape_text(s);
        out.push_back(std::move(one));
    }
    return true;
}

// Draws `p` at (x0, y0), each pixel `scale` x `scale`. u1 values are shown as
// they are; floats in [0, 1] are scaled to 0..255, others stretched from
// their minimum to their maximum. NaN is black.
void draw(canvas& c, const picture& p, std::size_t x0, std::size_t y0, std::size_t scale) {
    const tensor& t = *p.t;
    double lo = 0, hi = 255;
    if (is_float(t.dtype())) {
        lo = INFINITY;
        hi = -INFINITY;
        for (std::size_t y = 0; y < p.h; ++y)
            for (std::size_t x = 0; x < p.w; ++x)
                for (std::size_t k = 0; k < p.c; ++k) {
                    const double v = value_at(t, p.first + y * p.sy + x * p.sx + k * p.sc);
                    if (std::isfinite(v)) {
                        lo = std::min(lo, v);
                        hi = std::max(hi, v);
                    }
                }
        if (!(lo <= hi) || (lo >= 0 && hi <= 1)) {  // no finite value, or already a unit range
            lo = 0;
            hi = 1;
        }
    }
    const double range = hi > lo ? hi - lo : 1;
    const auto level = [&](double v) {
        if (!std::isfinite(v)) return std::uint8_t{0};
        return static_cast<std::uint8_t>(std::clamp(std::lround((v - lo) / range * 255.0), 0L, 255L));
    };
    for (std::size_t y = 0; y < p.h; ++y)
        for (std::size_t x = 0; x < p.w; ++x) {
            const std::size_t at = p.first + y * p.sy + x * p.sx;
            const std::uint8_t r = level(value_at(t, at));
            const std::uint8_t g = p.c >= 3 ? level(value_at(t, at + p.sc)) : r;
            const std::uint8_t b = p.c >= 3 ? level(value_at(t, at + 2 * p.sc)) : r;
            for (std::size_t dy = 0; dy < scale; ++dy)
                for (std::size_t dx = 0; dx < scale; ++dx) c.set(x0 + x * scale + dx, y0 + y * scale + dy, r, g, b);
        }
}

#if TENBIN_TOOL_PNG
// libpng reports errors by longjmp back here: this frame holds nothing
// with a destructor, nor a variable changed after setjmp.
bool png_write_all(png_structp png, png_infop info, std::FILE* f, png_uint_32 width, png_uint_32 height,
                   png_bytepp rows) {
    if (setjmp(png_jmpbuf(png))) return false;
    png_init_io(png, f);
    png_set_IHDR(png, info, width, height, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    png_write_rows(png, rows, height);
    png_write_end(png, info);
    return true;
}

void write_png(const std::string& path, const canvas& c) {
    struct file_closer {
        void operator()(std::FILE* f) const { std::fclose(f); }
    };
    const std::string part = path + ".part";
    std::unique_ptr<std::FILE, file_closer> f(std::fopen(part.c_str(), "wb"));
    if (!f) throw tenbin::error(errc::io_error, part + ": cannot create");
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
    png_infop info = png ? png_create_info_struct(png) : nullptr;
    if (!info) {
        png_destroy_write_struct(&png, nullptr);
        throw tenbin::error(errc::io_error, "libpng could not start");
    }
    std::vector<png_const_bytep> rows(c.height);
    for (std::size_t y = 0; y < c.height; ++y) rows[y] = &c.rgb[y * c.width * 3];
    const bool failed = !png_write_all(png, info, f.get(), static_cast<png_uint_32>(c.width),
                                       static_cast<png_uint_32>(c.height), const_cast<png_bytepp>(rows.data()));
    png_destroy_write_struct(&png, &info);
    const bool closed = std::fclose(f.release()) == 0;
    if (failed || !closed) {
        std::remove(part.c_str());
        throw tenbin::error(errc::io_error, part + ": writing the PNG failed");
    }
    if (std::rename(part.c_str(), path.c_str()) != 0) {
        std::remove(part.c_str());
        throw tenbin::error(errc::io_error, path + ": cannot rename the PNG into place");
    }
}
#endif

// The image-like items of `m` (at most `wanted`), as pictures_of counts them.
std::size_t images_in(const std::vector<tensor>& m, std::size_t wanted) {
    std::vector<picture> scratch;
    for (const tensor& t : m) pictures_of(t, {}, wanted - scratch.size(), scratch);
    return scratch.size();
}

// --count messages (0: until interrupted, or until --max-images images
// came: later ones could not be drawn, and only messages with images are
// kept). A signal ends the wait with what arrived.
std::vector<std::vector<tensor>> receive(const show_cli_options& opt) {
    connection_options co = connection_options_for(opt.socket, opt.source);
    co.allow64 = true;
    connection conn = open_connection(opt.socket, {opt.source}, co, "tenbin show");
    std::vector<std::vector<tensor>> out;
    std::size_t received = 0, images = 0;
    while ((opt.count ? received < opt.count : images < opt.max_images) && !interrupted()) {
        auto batch = receive_until(conn, deadline_in(opt.timeout));
        if (!batch) {
            if (interrupted()) break;
            throw tenbin::error(errc::timeout, "received " + std::to_string(received) +
                                                   (opt.count ? " of " + std::to_string(opt.count) : std::string()) +
                                                   " messages; nothing within " + seconds_text(opt.timeout) +
                                                   silence_hint({opt.source}, conn.endpoints()));
        }
        ++received;
        const std::size_t more = images_in(batch->tensors, opt.max_images - std::min(images, opt.max_images));
        if (opt.count == 0 && more == 0) continue;
        images += more;
        out.push_back(std::move(batch->tensors));
    }
    return out;
}

int run_show(const show_cli_options& opt) {
#if !TENBIN_TOOL_PNG
    throw tenbin::error(errc::unsupported, "this tenbin was built without libpng; show cannot write a PNG");
#else
    const bool url = opt.source.find("://") != std::string::npos;
    std::vector<std::vector<tensor>> messages;
    const interrupt_catcher catcher;
    if (url) {
        try {
            messages = receive(opt);
        } catch (const tenbin::error& e) {
            if (e.code() != errc::timeout) throw;
            std::cerr << "tenbin show: error: timeout: " << cli_text(e.what()) << "\n";
            return exit_timeout;
        }
    } else {
        messages = load_messages(opt.source);
    }
    std::vector<picture> pics;
    std::size_t others = 0;
    for (std::size_t m = 0; m < messages.size(); ++m)
        for (std::size_t i = 0; i < messages[m].size(); ++i) {
            const std::string where = (messages.size() > 1 ? "m" + std::to_string(m) + " " : "") + "t" + std::to_string(i);
            if (!pictures_of(messages[m][i], where, opt.max_images - pics.size(), pics)) ++others;
        }
    if (pics.empty())
        throw tenbin::error(errc::bad_argument, opt.source + ": no image-like tensor (u1 or float; HxW, HxWxC, CxHxW, "
                                                "NxHxWxC or NxCxHxW with C 1, 3 or 4)");

    // One cell size for all: the largest picture, enlarged if small, and its caption.
    std::size_t cell_w = min_cell_w, image_h = 0;
    for (const picture& p : pics) {
        const std::size_t scale = std::max<std::size_t>(1, target_side / std::max(p.h, p.w));
        cell_w = std::max(cell_w, p.w * scale);
        image_h = std::max(image_h, p.h * scale);
    }
    // Captions wrap to the cell's width (a shape is never cut), and every
    // cell has room for the longest.
    std::vector<std::vector<std::string>> captions;
    std::size_t caption_lines = 0;
    for (const picture& p : pics) {
        std::vector<std::string>& lines = captions.emplace_back();
        for (const std::string& text : p.caption)
            for (std::string& line : wrapped(text, cell_w / char_w)) lines.push_back(std::move(line));
        caption_lines = std::max(caption_lines, lines.size());
    }
    const std::size_t cell_h = image_h + caption_lines * line_h;
    const std::size_t columns = std::min(pics.size(), opt.columns);
    const std::size_t rows = (pics.size() + columns - 1) / columns;
    const std::size_t width = columns * (cell_w + pad) + pad, height = rows * (cell_h + pad) + pad;
    if (width > max_side || height > max_side)
        throw usage_error("the picture would be " + std::to_string(width) + " x " + std::to_string(height) +
                          " pixels, over " + std::to_string(max_side) + "; lower --max-images or change --columns");
    canvas c(width, height);
    for (std::size_t k = 0; k < pics.size(); ++k) {
        const picture& p = pics[k];
        const std::size_t x0 = pad + (k % columns) * (cell_w + pad), y0 = pad + (k / columns) * (cell_h + pad);
        const std::size_t scale = std::max<std::size_t>(1, target_side / std::max(p.h, p.w));
        draw(c, p, x0, y0, scale);
        for (std::size_t l = 0; l < captions[k].size(); ++l) c.write(x0, y0 + image_h + l * line_h + 1, captions[k][l]);
    }
    write_png(opt.out, c);
    std::cout << opt.out << ": " << pics.size() << (pics.size() == 1 ? " image, " : " images, ") << width << " x "
              << height << " pixels";
    if (others) std::cout << " (" << others << " tensors not image-like skipped)";
    std::cout << '\n';
    return interrupted() ? interrupted_status() : exit_ok;
#endif
}

}  // namespace

subcommand add_show(CLI::App& parent) {
    auto opt = std::make_shared<show_cli_options>();
    CLI::App* app = parent.add_subcommand(
        "show", "Draw the image-like tensors of a file or of received messages into a PNG (tensorshow)");
    app->add_option("SOURCE", opt->source,
                    "A file (.ten, .npy, .npz, .safetensors, or a .tar shard), or a tensorcom URL /\n"
                    "ZeroMQ endpoint to receive from")
        ->required();
    app->add_option("-o,--out", opt->out, "The PNG file to write")->required();
    app->add_option("-n,--count", opt->count,
                    "Messages to receive from a URL; 0: until interrupted, or until --max-images\n"
                    "images came")
        ->check(nonnegative)
        ->capture_default_str();
    app->add_option("--columns", opt->columns, "Images per row of the grid")->check(positive)->capture_default_str();
    app->add_option("--max-images", opt->max_images, "Draw at most this many images")
        ->check(positive)
        ->capture_default_str();
    app->add_option("--timeout", opt->timeout, "Seconds to wait for each message (0: forever); exit 2 after")
        ->check(nonnegative)
        ->capture_default_str();
    add_socket_choice(*app, opt->socket, {"sub", "pull", "pair"}, tenbin::socket_kind::sub, true);
    app->footer(
        "Image-like tensors are u1 or float (f2, f4, f8) of shape HxW (gray), HxWxC,\n"
        "CxHxW, NxHxWxC or NxCxHxW with C = 1, 3 or 4 (channels last when both fit;\n"
        "alpha is ignored). Each image is a cell of the grid, enlarged to about 64\n"
        "pixels a side when smaller, captioned with where it is (message m, tensor t,\n"
        "batch item #), its info, dtype and shape (wrapped to the cell, never cut).\n"
        "Only the images drawn are read: --max-images bounds the work. u1 values are\n"
        "drawn as they are; floats in [0, 1] scaled to 0..255, other floats stretched\n"
        "from their minimum to their maximum. Other tensors are skipped.\n" +
        plain_endpoint_note(opt->socket) +
        "Ctrl-C (SIGINT) or SIGTERM stops receiving: what arrived is drawn.\n"
        "Exit status: 0 written, 1 error (nothing image-like, unreadable file, ...),\n"
        "2 timed out waiting for a message, 64 wrong options or arguments,\n"
        "130 interrupted (SIGINT), 143 terminated (SIGTERM).\n"
        "Examples:\n"
        "  tenbin show batch.ten --out batch.png\n"
        "  tenbin show zsub://localhost:7880 -n 4 --out stream.png   (SUB connects)");
    return {app, [opt] { return run_show(*opt); }};
}

}  // namespace tenbin::cli
