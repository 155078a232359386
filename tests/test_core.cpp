// The core: dtypes, buffers and their keepers, tensors, and the codec.
#include "support.hpp"

#include <doctest/doctest.h>
#include <tenbin/core.hpp>

#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <numeric>
#include <sstream>
#include <span>

using namespace tenbin;
using test_support::error_class;
using test_support::error_text;
using test_support::same_bytes;
using test_support::le64;
using test_support::patterned;
using test_support::str64;

namespace {

// A chunked buffer holding the given payloads, built by hand.
std::vector<std::byte> chunks_of(std::initializer_list<std::vector<std::byte>> payloads) {
    std::vector<std::byte> out;
    for (const auto& p : payloads) {
        const auto pre = le64({str64("~TenBin~"), static_cast<std::int64_t>(p.size())});
        out.insert(out.end(), pre.begin(), pre.end());
        out.insert(out.end(), p.begin(), p.end());
        out.resize(out.size() + (64 - p.size() % 64) % 64);
    }
    return out;
}

}  // namespace

TEST_CASE("dtypes have their codes and item sizes") {
    CHECK(std::size(all_dtypes) == 11);
    for (dtype t : all_dtypes) {
        CAPTURE(code(t));
        CHECK(parse_dtype(code(t)) == t);
        CHECK(itemsize(t) == static_cast<std::size_t>(code(t)[1] - '0'));
    }
    CHECK(itemsize(dtype::f2) == 2);
    CHECK(parse_dtype("u4") == dtype::u4);
    CHECK_FALSE(parse_dtype("c8"));
    CHECK_FALSE(parse_dtype(""));
    CHECK_FALSE(parse_dtype("f4 "));
    CHECK(dtype_of<float> == dtype::f4);
    CHECK(dtype_of<std::uint32_t> == dtype::u4);
    CHECK(dtype_of<float16> == dtype::f2);
}

TEST_CASE("float16 converts exactly where it can and rounds to nearest even") {
    CHECK(float16::from_float(1.0f).bits == 0x3c00);
    CHECK(float16::from_float(-2.0f).bits == 0xc000);
    CHECK(float16::from_float(65504.0f).bits == 0x7bff);
    CHECK(float16::from_float(65520.0f).bits == 0x7c00);  // rounds up to inf
    CHECK(float16::from_float(INFINITY).bits == 0x7c00);
    CHECK(std::isnan(float16::from_float(NAN).to_float()));
    CHECK(float16::from_float(5.960464477539063e-08f).bits == 0x0001);  // smallest subnormal
    CHECK(float16::from_float(1.0f + 1.0f / 2048).bits == 0x3c00);      // tie to even
    CHECK(float16::from_float(1.0f + 3.0f / 2048).bits == 0x3c02);
    for (std::uint32_t b = 0; b < 0x10000; ++b) {
        const float16 h{static_cast<std::uint16_t>(b)};
        const float f = h.to_float();
        if (std::isnan(f)) continue;
        REQUIRE(float16::from_float(f).bits == b);
    }
}

TEST_CASE("a buffer's keeper lives as long as any copy or slice") {
    std::atomic<int> released{0};
    std::vector<std::byte> storage(100, std::byte{1});
    SUBCASE("adopted memory is released exactly once, after the last user") {
        buffer slice;
        {
            buffer b = buffer::adopt(storage.data(), storage.size(), [&] { ++released; });
            CHECK(b.owned());
            buffer copy = b;
            slice = copy.slice(10, 20);
            CHECK(b.use_count() == 3);
        }
        CHECK(released == 0);
        CHECK(slice.size() == 20);
        CHECK(slice.data() == storage.data() + 10);
        slice = buffer();
        CHECK(released == 1);
    }
    SUBCASE("a tensor over adopted memory keeps it") {
        {
            tensor t(dtype::u1, {100}, buffer::adopt(storage.data(), 100, [&] { ++released; }), "x");
            auto decoded = decode_buffer(encode_buffer(t));
            tensor copy = t;
            t = tensor();
            CHECK(released == 0);
            CHECK(copy.data().data() == storage.data());
        }
        CHECK(released == 1);
    }
    SUBCASE("slices out of range are refused") {
        buffer b = buffer::copy(storage);
        CHECK(error_class([&] { (void)b.slice(90, 11); }) == "bad_argument");
        CHECK(error_class([&] { (void)b.slice(101, 0); }) == "bad_argument");
        CHECK(b.slice(100, 0).empty());
    }
    SUBCASE("allocated buffers are aligned and written in place; borrowed ones are copied first") {
        for (std::size_t n : {0, 1, 63, 64, 1000}) {
            buffer b = buffer::allocate(n);
            CHECK(b.aligned_to(buffer_alignment));
            const std::byte* at = b.data();
            CHECK(b.exclusive());
            CHECK(b.writable_bytes().size() == n);
            CHECK(b.data() == at);
        }
        buffer borrowed = buffer::borrow(storage);
        CHECK_FALSE(borrowed.owned());
        CHECK_FALSE(borrowed.exclusive());
        const mutable_bytes mine = borrowed.writable_bytes();
        CHECK(mine.data() != reinterpret_cast<const std::byte*>(storage.data()));
        CHECK(borrowed.owned());
        CHECK(std::memcmp(mine.data(), storage.data(), mine.size()) == 0);
    }
    SUBCASE("adopting a vector moves its storage without a copy") {
        std::vector<float> v(1000, 2.5f);
        const float* p = v.data();
        tensor t = tensor::from_vector(std::move(v), {10, 100}, "vec");
        CHECK(reinterpret_cast<const float*>(t.data().data()) == p);
        CHECK(t.values<float>()[999] == 2.5f);
    }
}

TEST_CASE("keep shares owned bytes and copies views and borrowed bytes") {
    std::array<std::byte, 4> storage{};
    const tensor owned(dtype::u1, {4}, buffer::copy(storage));
    const tensor borrowed(dtype::u1, {4}, buffer::borrow(storage));
    const std::vector<tensor> list{owned, borrowed};
    const std::vector<tensor> kept = keep(list);
    CHECK(kept[0].data().data() == owned.data().data());
    CHECK(kept[1].data().data() != borrowed.data().data());
    storage[0] = std::byte{7};  // the caller refills its memory after the send
    CHECK(kept[1].data().data()[0] == std::byte{0});
    const std::vector<tensor_view> views{borrowed.view()};
    CHECK(keep(views)[0].data().data() != borrowed.data().data());
}

TEST_CASE("shapes keep small ranks inline, larger ones on the heap, and behave as values") {
    shape_t small{2, 3, 4};
    CHECK(small.size() == 3);
    CHECK(small.capacity() == shape_t::inline_capacity);
    const std::int64_t* inline_at = small.data();
    CHECK(reinterpret_cast<const std::byte*>(inline_at) >= reinterpret_cast<const std::byte*>(&small));
    CHECK(reinterpret_cast<const std::byte*>(inline_at) < reinterpret_cast<const std::byte*>(&small + 1));

    // Growing past the inline dims moves them to the heap, in order.
    shape_t grown = small;
    for (std::int64_t d = 5; d <= 12; ++d) grown.push_back(d);
    CHECK(grown.size() == 11);
    CHECK(grown.capacity() >= 11);
    CHECK(grown == shape_t{2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
    CHECK(small == shape_t{2, 3, 4});  // the copy was deep

    // Moves take the heap block or copy the inline dims; the source is rank 0.
    const std::int64_t* heap_at = grown.data();
    shape_t moved = std::move(grown);
    CHECK(moved.data() == heap_at);
    CHECK(grown.empty());
    shape_t moved_small = std::move(small);
    CHECK(moved_small == shape_t{2, 3, 4});
    moved_small = moved;
    CHECK(moved_small.size() == 11);
    moved = shape_t{7};
    CHECK(moved == shape_t{7});

    // What vectors do, shapes do.
    shape_t s(3, 1);
    CHECK(s == shape_t{1, 1, 1});
    s.insert(s.begin() + 1, 9);
    CHECK(s == shape_t{1, 9, 1, 1});
    s.resize(9, 2);
    CHECK(s.back() == 2);
    CHECK(s[3] == 1);
    s.resize(2);
    CHECK(s == shape_t{1, 9});
    const std::vector<std::int64_t> v{4, 5};
    CHECK(shape_t(v) == shape_t{4, 5});
    CHECK(shape_t(v.begin(), v.end()) == shape_t{4, 5});
    const std::span<const std::int64_t> dims = s;
    CHECK(dims.size() == 2);
    CHECK(dims[1] == 9);
    CHECK(shape_t{} == shape_t());
    CHECK_FALSE(shape_t{0} == shape_t{});
}

TEST_CASE("tensors check what they are given") {
    CHECK(error_class([] { tensor(dtype::f4, {2, 3}, buffer::allocate(23)); }) == "bad_argument");
    CHECK(error_class([] { tensor(dtype::f4, {-1}, buffer::allocate(0)); }) == "bad_argument");
    CHECK(error_class([] { tensor::zeros(dtype::u1, {1}, "ninechars"); }) == "bad_argument");
    CHECK(error_class([] { tensor::zeros(dtype::u1, {1}, "caf\xc3\xa9"); }) == "bad_argument");
    // NULs at either end would not come back (decoders strip them); inside
    // they do, as Python writes them.
    CHECK(error_class([] { tensor::zeros(dtype::u1, {1}, std::string("\0ab", 3)); }) == "bad_argument");
    CHECK(error_class([] { tensor::zeros(dtype::u1, {1}, std::string("ab\0", 3)); }) == "bad_argument");
    CHECK(tensor::zeros(dtype::u1, {1}, std::string("a\0b", 3)).info() == std::string("a\0b", 3));
    CHECK(error_class([] { tensor::zeros(dtype::u1, shape_t(65, 1)); }) == "bad_argument");
    CHECK(error_class([] { tensor::zeros(dtype::u8, {1 << 30, 1 << 30, 1 << 30}); }) == "bad_argument");
    tensor t = tensor::zeros(dtype::i2, {3}, "eightchr");
    CHECK(t.info() == "eightchr");
    CHECK(t.with_info("ab").info() == "ab");  // a shorter info leaves nothing of the longer
    CHECK(t.with_info("").info().empty());
    CHECK(error_class([&] { (void)t.with_info("ninechars"); }) == "bad_argument");
    CHECK(tensor(t).info() == "eightchr");
    CHECK(error_class([&] { (void)t.values<float>(); }) == "bad_argument");
    CHECK(t.values<std::int16_t>().size() == 3);
    CHECK(t.count() == 3);
    tensor scalar = tensor::zeros(dtype::f8, {});
    CHECK(scalar.ndim() == 0);
    CHECK(scalar.nbytes() == 8);

    // A dtype cast from a bad integer is refused wherever it comes in.
    const auto bad = static_cast<dtype>(42);
    CHECK(code(bad) == "invalid");
    CHECK(error_text([&] { tensor::zeros(bad, {1}); }) == "bad_argument: dtype value 42 is not one of the format's");
    CHECK(error_class([&] { tensor(bad, {1}, buffer::allocate(8)); }) == "bad_argument");
    const std::byte one[8]{};
    const tensor_view v{bad, {}, "", one};
    CHECK(error_class([&] { (void)encode_header(v); }) == "bad_argument");
    CHECK(error_class([&] { (void)encode_buffer(v); }) == "bad_argument");

    // Nothing to write in an empty tensor, whatever its buffer.
    tensor empty;
    CHECK(empty.mutable_values<std::uint8_t>().empty());
}

// Borrowing needs memory that outlives the call: a temporary container is refused.
template <class R>
concept borrowable = requires(R&& r) { tensor::borrow(std::forward<R>(r), shape_t{}); };
static_assert(borrowable<std::vector<float>&> && borrowable<const std::vector<float>&>);
static_assert(borrowable<std::span<float>> && borrowable<std::span<const float>>);
static_assert(!borrowable<std::vector<float>> && !borrowable<std::vector<float>&&>);
// The same with the element type given, which selects the span overload.
template <class T, class R>
concept borrowable_as = requires(R&& r) { tensor::borrow<T>(std::forward<R>(r), shape_t{}); };
static_assert(borrowable_as<float, std::vector<float>&> && borrowable_as<float, std::span<const float>>);
static_assert(!borrowable_as<float, std::vector<float>> && !borrowable_as<float, std::array<float, 3>>);

TEST_CASE("borrowing takes any contiguous range the caller keeps; long long is i8") {
    std::vector<float> v{1, 2, 3, 4, 5, 6};
    const tensor a = tensor::borrow(v, {2, 3}, "v");
    CHECK(a.dtype() == dtype::f4);
    CHECK(a.data().data() == reinterpret_cast<const std::byte*>(v.data()));  // no copy
    CHECK_FALSE(a.data().owned());
    std::array<std::uint16_t, 3> arr{7, 8, 9};
    CHECK(tensor::borrow(arr, {3}).values<std::uint16_t>()[2] == 9);
    CHECK(tensor::borrow(std::span(v).first(3), {3}).count() == 3);
    CHECK(error_class([&] { (void)tensor::borrow(v, {4}); }) == "bad_argument");

    CHECK(tensor::from_vector(std::vector<long long>{1, 2}).dtype() == dtype::i8);
    CHECK(tensor::from_vector(std::vector<unsigned long long>{1}).dtype() == dtype::u8);
}

TEST_CASE("buffers adopt vectors and caller memory, never null memory with a size") {
    // The size is read before the vector moves into its keeper (an
    // argument-order bug crashed this under clang).
    const buffer b = buffer::adopt(std::vector<float>{1, 2, 3});
    CHECK(b.size() == 12);
    CHECK(reinterpret_cast<const float*>(b.data())[2] == 3.0f);
    CHECK(tensor::from_vector(std::vector<std::int16_t>{1, 2, 3, 4, 5}).count() == 5);

    CHECK(error_class([] { buffer::adopt(nullptr, 16, nullptr); }) == "bad_argument");
    CHECK(buffer::adopt(nullptr, 0, nullptr).empty());
    int released = 0;
    { buffer::adopt(nullptr, 0, [&] { ++released; }); }
    CHECK(released == 1);
}

TEST_CASE("typed access refuses misaligned bytes; aligned() copies them") {
    alignas(8) std::byte raw[40] = {};
    const float one = 1.0f;
    std::memcpy(raw + 1, &one, 4);
    tensor t(dtype::f4, {1}, buffer::borrow({raw + 1, 4}));
    CHECK(error_class([&] { (void)t.values<float>(); }) == "unsupported");
    tensor a = t.aligned();
    CHECK(a.values<float>()[0] == 1.0f);
    CHECK_FALSE(a.data().writable());  // borrowed bytes were read-only; so is their copy
    buffer owned = buffer::allocate(8);
    const tensor writable(dtype::f4, {1}, buffer::share(owned.keeper(), owned.writable_bytes().subspan(1, 4)));
    CHECK(writable.aligned().data().writable());
    tensor already = tensor::zeros(dtype::f4, {4});
    CHECK(already.aligned().data().data() == already.data().data());
}

TEST_CASE("round trips over every dtype, ranks 0 to 9, zero-size dims and odd sizes") {
    for (dtype t : all_dtypes) {
        CAPTURE(code(t));
        std::vector<tensor> tensors;
        for (std::size_t rank = 0; rank <= 9; ++rank) {
            shape_t shape(rank, 1);
            if (rank > 0) shape[0] = 3 + static_cast<std::int64_t>(rank);  // not a multiple of 64 bytes
            if (rank > 1) shape[rank - 1] = 5;
            tensors.push_back(patterned(t, shape, std::string(rank % 9, 'a' + static_cast<char>(rank)),
                                        static_cast<int>(rank)));
        }
        tensors.push_back(patterned(t, {0}));
        tensors.push_back(patterned(t, {4, 0, 7}, "zero"));
        tensors.push_back(patterned(t, {7, 9, 1}, "max8chrs"));

        SUBCASE("chunked form") {
            const buffer encoded = encode_buffer(tensors);
            CHECK(encoded.size() == encoded_size(tensors));
            CHECK(encoded.size() % 16 == 0);
            const auto back = decode_buffer(encoded);
            REQUIRE(back.size() == tensors.size());
            for (std::size_t i = 0; i < back.size(); ++i) CHECK(back[i].view() == tensors[i].view());
        }
        SUBCASE("list form shares the tensors' bytes both ways") {
            const auto frames = encode_list(tensors);
            REQUIRE(frames.size() == 2 * tensors.size());
            for (std::size_t i = 0; i < tensors.size(); ++i) {
                CHECK(frames[2 * i + 1].data() == tensors[i].data().data());
                CHECK(frames[2 * i].size() == header_size(tensors[i].ndim()));
            }
            const auto back = decode_list(frames);
            REQUIRE(back.size() == tensors.size());
            for (std::size_t i = 0; i < back.size(); ++i) {
                CHECK(back[i].view() == tensors[i].view());
                CHECK(back[i].data().data() == tensors[i].data().data());
            }
        }
    }
}

TEST_CASE("headers encode as the format says") {
    tensor t = patterned(dtype::f4, {2, 3}, "abc");
    const auto h = encode_header(t);
    CHECK(same_bytes(h, le64({str64("f4"), str64("abc"), 2, 2, 3})));
    const tensor_header d = decode_header(h);
    CHECK(d.dtype == dtype::f4);
    CHECK(d.info == "abc");
    CHECK(d.shape == shape_t{2, 3});
    CHECK(d.nbytes == 24);

    const buffer chunked = encode_buffer(t);
    // header chunk: 16 + 40 padded to 64; data chunk: 16 + 24 padded to 64
    CHECK(chunked.size() == 16 + 64 + 16 + 64);
    CHECK(std::memcmp(chunked.data(), "~TenBin~", 8) == 0);
    CHECK(std::memcmp(chunked.data() + 80, "~TenBin~", 8) == 0);
    for (std::size_t i = 16 + 40; i < 80; ++i) CHECK(chunked.data()[i] == std::byte{0});
}

TEST_CASE("encoders accept tensors, views, single tensors and braced lists") {
    const tensor a = patterned(dtype::u2, {4}, "a");
    const tensor b = patterned(dtype::i8, {2, 2}, "b");
    const std::vector<tensor> list{a, b};
    const std::vector<tensor_view> views{a.view(), b.view()};
    const buffer from_list = encode_buffer(list);
    CHECK(same_bytes(encode_buffer(views).bytes(), from_list.bytes()));
    CHECK(same_bytes(encode_buffer({a, b}).bytes(), from_list.bytes()));
    CHECK(same_bytes(encode_buffer({a.view(), b.view()}).bytes(), from_list.bytes()));
    CHECK(decode_buffer(encode_buffer(a)).size() == 1);
    CHECK(same_bytes(encode_buffer(a.view()).bytes(), encode_buffer(a).bytes()));
    CHECK(encode_buffer({}).size() == 0);
    CHECK(decode_list(encode_list({})).empty());

    std::vector<std::byte> out(encoded_size(list));
    encode_buffer_into(list, out);
    CHECK(same_bytes(out, from_list.bytes()));
    std::vector<std::byte> wrong(out.size() - 64);
    CHECK(error_class([&] { encode_buffer_into(list, wrong); }) == "bad_argument");

    // A view's bytes belong to nobody here: encode_list borrows them.
    const auto frames = encode_list(views);
    CHECK_FALSE(frames[1].owned());
    CHECK(frames[1].data() == a.data().data());
}

TEST_CASE("a named braced tensor_span refers to the tensors themselves, never to a dead array") {
    const tensor a = patterned(dtype::u2, {4}, "a");
    const tensor b = patterned(dtype::i8, {2, 2}, "b");
    const tensor_span batch = {a, b};  // was a dangling initializer_list
    const tensor_span views = {a.view(), b.view()};
    std::vector<tensor> pad(64, patterned(dtype::u1, {100}));  // reuses the stack and heap a dead array had
    REQUIRE(batch.size() == 2);
    CHECK(batch.owner(0) == &a.data());
    CHECK(batch.owner(1) == &b.data());
    CHECK(batch[1] == b.view());
    CHECK(views.owner(0) == nullptr);
    CHECK(views.size() == 2);
    CHECK(same_bytes(encode_buffer(batch).bytes(), encode_buffer(std::vector<tensor>{a, b}).bytes()));
    // The longest braced list, element by element.
    const tensor_span sixteen = {a, b, a, b, a, b, a, b, a, b, a, b, a, b, a, b};
    CHECK(sixteen.size() == max_braced_tensors);
    CHECK(sixteen.owner(15) == &b.data());
}

TEST_CASE("writing never reaches bytes another holder has: copy on write") {
    SUBCASE("the only holder writes in place") {
        tensor t = tensor::zeros(dtype::f4, {1000});
        const std::byte* at = t.data().data();
        CHECK(t.data().exclusive());
        t.mutable_values<float>()[0] = 1.0f;
        CHECK(t.data().data() == at);
    }
    SUBCASE("a copy of the tensor keeps the old values") {
        tensor t = patterned(dtype::f4, {10, 10});
        const tensor kept = t;
        CHECK_FALSE(t.data().exclusive());
        t.mutable_values<float>()[3] = 42.0f;
        CHECK(t.data().data() != kept.data().data());
        CHECK(t.values<float>()[3] == 42.0f);
        CHECK(kept.view() == patterned(dtype::f4, {10, 10}).view());
        // The rest was carried over: only the write differs.
        CHECK(std::memcmp(t.data().data(), kept.data().data(), 12) == 0);
        CHECK(std::memcmp(t.data().data() + 16, kept.data().data() + 16, 400 - 16) == 0);
        // Once alone again, writes stay in place.
        const std::byte* mine = t.data().data();
        t.mutable_values<float>()[4] = 1.0f;
        CHECK(t.data().data() == mine);
    }
    SUBCASE("a holder of the keeper alone (as ZeroMQ holds a frame) counts too") {
        tensor t = tensor::zeros(dtype::u1, {64});
        buffer::keeper_type in_flight = t.data().keeper();
        const std::byte* sent = t.data().data();
        t.mutable_bytes()[0] = std::byte{9};
        CHECK(t.data().data() != sent);
        CHECK(sent[0] == std::byte{0});
        in_flight.reset();
    }
    SUBCASE("slices of one block share it: the first write copies the slice only") {
        buffer whole = buffer::allocate(128);
        std::memset(whole.writable_bytes().data(), 5, 128);
        tensor t(dtype::u1, {32}, whole.slice(32, 32));
        t.mutable_bytes()[0] = std::byte{1};
        CHECK(t.nbytes() == 32);
        CHECK(whole.data()[32] == std::byte{5});
    }
    SUBCASE("adopted memory is written in place while alone; its release still runs once") {
        std::vector<std::byte> storage(16);
        int released = 0;
        {
            tensor t(dtype::u1, {16}, buffer::adopt(storage.data(), 16, [&] { ++released; }));
            t.mutable_bytes()[1] = std::byte{7};
            CHECK(storage[1] == std::byte{7});
            const tensor other = t;
            t.mutable_bytes()[2] = std::byte{7};
            CHECK(storage[2] == std::byte{0});
            CHECK(released == 0);
        }
        CHECK(released == 1);
    }
}

TEST_CASE("infos can be replaced, read back and checked") {
    const std::vector<tensor> ts{patterned(dtype::u1, {1}), patterned(dtype::u1, {2})};
    const std::vector<std::string> infos{"input", "target"};
    const auto named = with_infos(ts, infos);
    CHECK(infos_of(named) == infos);
    CHECK(named[0].data().data() == ts[0].data().data());
    const buffer enc = encode_buffer(named);
    CHECK(infos_of(decode_buffer(enc)) == infos);
    CHECK_NOTHROW(decode_buffer(enc, {.expect_infos = infos}));
    const std::vector<std::string> wrong{"input", "label"};
    CHECK(error_class([&] { (void)decode_buffer(enc, {.expect_infos = wrong}); }) == "info_mismatch");
    CHECK(error_class([&] { with_infos(ts, std::vector<std::string>{"one"}); }) == "bad_argument");
    CHECK(error_class([&] { with_infos(ts, std::vector<std::string>{"a", "toolongname"}); }) == "bad_argument");
}

TEST_CASE("malformed headers get their class") {
    using V = std::vector<std::byte>;
    CHECK(error_class([] { (void)decode_header(V(16)); }) == "bad_header");
    CHECK(error_class([] { (void)decode_header(V(30)); }) == "bad_header");
    CHECK(error_class([] { (void)decode_header(le64({str64("f4"), 0, 1})); }) == "bad_header");       // ndim 1, no dim
    CHECK(error_class([] { (void)decode_header(le64({str64("f4"), 0, -1})); }) == "bad_header");
    CHECK(error_class([] { (void)decode_header(le64({str64("f4"), 0, 1, -5})); }) == "bad_header");
    CHECK(error_class([] { (void)decode_header(le64({str64("c8"), 0, 0})); }) == "unknown_dtype");
    CHECK(error_class([] { (void)decode_header(le64({str64(std::string_view("f4\0x", 4)), 0, 0})); }) == "unknown_dtype");
    CHECK(error_class([] { (void)decode_header(le64({0, 0, 0})); }) == "unknown_dtype");
    CHECK(error_class([] { (void)decode_header(le64({str64("f4"), str64("\xff"), 0})); }) == "bad_header");
    // Python's decoder strips NULs from both ends of an info and keeps those
    // inside; so does this one.
    CHECK(decode_header(le64({str64("f4"), str64(std::string_view("a\0b", 3)), 0})).info == std::string("a\0b", 3));
    CHECK(decode_header(le64({str64("f4"), str64(std::string_view("\0\0img", 5)), 0})).info == "img");
    CHECK(decode_header(le64({str64("f4"), str64(std::string_view("\0\0\0", 3)), 0})).info.empty());
    // dims whose product overflows 64 bits
    CHECK(error_class([] { (void)decode_header(le64({str64("u1"), 0, 2, 1LL << 40, 1LL << 40})); }) == "bad_header");
    CHECK(error_class([] { (void)decode_header(le64({str64("f8"), 0, 1, 1LL << 62})); }) == "bad_header");
    // a zero dimension makes the product 0 whatever the others are
    CHECK(decode_header(le64({str64("u1"), 0, 3, 1LL << 40, 0, 1LL << 40})).nbytes == 0);
    // limits
    CHECK(error_class([] { (void)decode_header(le64({str64("u1"), 0, 17, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1})); }) ==
          "limit_exceeded");
    CHECK(error_class([] { (void)decode_header(le64({str64("u1"), 0, 1, 100}), {.max_bytes = 99}); }) == "limit_exceeded");
    CHECK(decode_header(le64({str64("u1"), 0, 1, 99}), {.max_bytes = 99}).nbytes == 99);
    CHECK(decode_header(le64({str64("u1"), 0, 2, 1, 1}), {.max_rank = 2}).shape.size() == 2);
    // The error names the bound that was hit: the limit, or the format's own.
    std::vector<std::int64_t> rank65{str64("u1"), 0, 65};
    rank65.resize(rank65.size() + 65, 1);
    CHECK(error_text([&] { (void)decode_header(le64(rank65), {.max_rank = 1000}); }) ==
          "limit_exceeded: rank 65 exceeds the supported maximum of 64");
    CHECK(error_text([&] { (void)decode_header(le64(rank65), {.max_rank = 16}); }) ==
          "limit_exceeded: rank 65 exceeds limits::max_rank = 16");
}

TEST_CASE("malformed chunked buffers get their class") {
    const auto header = le64({str64("u1"), 0, 1, 3});
    const std::vector<std::byte> data(3, std::byte{9});
    const auto good = chunks_of({header, data});
    CHECK(decode_buffer(good).size() == 1);

    SUBCASE("every truncation is an error, never a crash") {
        for (std::size_t n = 1; n < good.size(); ++n) {
            CAPTURE(n);
            const std::string c = error_class([&] { (void)decode_buffer(bytes_view(good).first(n)); });
            CHECK((c == "truncated" || c == "length_beyond_end" || c == "odd_chunk_count"));
        }
    }
    SUBCASE("lengths") {
        auto neg = good;
        const std::int64_t minus = -16;
        std::memcpy(neg.data() + 8, &minus, 8);
        CHECK(error_class([&] { (void)decode_buffer(neg); }) == "negative_length");
        auto huge = good;
        const std::int64_t big = std::int64_t{1} << 62;
        std::memcpy(huge.data() + 8, &big, 8);
        CHECK(error_class([&] { (void)decode_buffer(huge); }) == "length_beyond_end");
    }
    SUBCASE("magic, odd chunks, data size") {
        auto bad = good;
        bad[3] = std::byte{'X'};
        CHECK(error_class([&] { (void)decode_buffer(bad); }) == "bad_magic");
        // Fewer than 8 bytes: a start of the magic is cut short, anything
        // else is not tenbin at all.
        CHECK(error_class([&] { (void)decode_buffer(std::as_bytes(std::span("HELLO", 5))); }) == "bad_magic");
        CHECK(error_class([&] { (void)decode_buffer(std::as_bytes(std::span("~TenB", 5))); }) == "truncated");
        CHECK(error_class([&] { (void)decode_buffer(chunks_of({header})); }) == "odd_chunk_count");
        CHECK(error_class([&] { (void)decode_buffer(chunks_of({header, std::vector<std::byte>(2)})); }) ==
              "data_size_mismatch");
        CHECK(error_class([&] { (void)decode_buffer(chunks_of({header, std::vector<std::byte>(4)})); }) ==
              "data_size_mismatch");
        CHECK(error_class([&] { (void)decode_buffer(chunks_of({std::vector<std::byte>(), data})); }) == "bad_header");
    }
    SUBCASE("limits on tensors and bytes") {
        std::vector<std::byte> many;
        for (int i = 0; i < 5; ++i) {
            auto more = chunks_of({header, data});
            many.insert(many.end(), more.begin(), more.end());
        }
        CHECK(decode_buffer(many).size() == 5);
        CHECK(error_class([&] { (void)decode_buffer(many, {.limits = {.max_tensors = 4}}); }) == "limit_exceeded");
        CHECK(error_class([&] { (void)decode_buffer(many, {.limits = {.max_bytes = 14}}); }) == "limit_exceeded");
        CHECK(decode_buffer(many, {.limits = {.max_tensors = 5, .max_bytes = 15}}).size() == 5);
    }
    SUBCASE("messages name the place") {
        auto bad = good;
        bad[80] = std::byte{'X'};
        try {
            (void)decode_buffer(bad);
            FAIL("no error");
        } catch (const error& e) {
            CHECK(e.code() == errc::bad_magic);
            CHECK(std::string(e.what()).find("offset 80") != std::string::npos);
        }
    }
    SUBCASE("empty input is an empty list") {
        CHECK(decode_buffer(bytes_view{}).empty());
        CHECK(encode_buffer(std::vector<tensor>{}).empty());
    }
}

TEST_CASE("list form errors") {
    const tensor t = patterned(dtype::i4, {10}, "x");
    auto frames = encode_list(t);
    CHECK(error_class([&] { (void)decode_list(std::span(frames).first(1)); }) == "odd_chunk_count");
    frames[1] = frames[1].slice(0, 36);
    CHECK(error_class([&] { (void)decode_list(frames); }) == "data_size_mismatch");
    std::vector<buffer> many;
    for (int i = 0; i < 3; ++i) {
        auto f = encode_list(t);
        many.insert(many.end(), f.begin(), f.end());
    }
    CHECK(error_class([&] { (void)decode_list(many, {.limits = {.max_tensors = 2}}); }) == "limit_exceeded");
    CHECK(decode_list(many).size() == 3);
}

TEST_CASE("encode_chunks and decode_chunks are inverse and slice without copying") {
    const std::vector<std::byte> a(5, std::byte{1}), b, c(64, std::byte{3});
    const std::vector<bytes_view> payloads{a, b, c};
    const buffer enc = encode_chunks(payloads);
    CHECK(enc.size() == 80 + 16 + 80);
    const auto back = decode_chunks(enc);
    REQUIRE(back.size() == 3);
    CHECK(same_bytes(back[0].bytes(), a));
    CHECK(back[1].empty());
    CHECK(same_bytes(back[2].bytes(), c));
    CHECK(back[2].data() == enc.data() + 96 + 16);
    CHECK(back[0].use_count() == enc.use_count());
}

TEST_CASE("dtypes, shapes and tensors print as one line, without the data") {
    std::ostringstream out;
    out << dtype::f4 << ' ' << dtype::u4;
    CHECK(out.str() == "f4 u4");
    CHECK(to_string(dtype::i8) == "i8");
    CHECK(to_string(shape_t{3, 224, 224}) == "[3, 224, 224]");
    CHECK(to_string(shape_t{}) == "[]");
    CHECK(to_string(shape_t{0}) == "[0]");
    CHECK(to_string(shape_t{1, 2, 3, 4, 5, 6, 7}) == "[1, 2, 3, 4, 5, 6, 7]");  // beyond the inline capacity
    const tensor t = tensor::zeros(dtype::f2, {2, 3}, "images");
    std::ostringstream line;
    line << t;
    CHECK(line.str() == "tensor(info=\"images\", dtype=f2, shape=[2, 3], nbytes=12)");
    CHECK(to_string(t) == line.str());
    SUBCASE("rank 0 and no info") {
        CHECK(to_string(tensor::zeros(dtype::u1, {})) == "tensor(info=\"\", dtype=u1, shape=[], nbytes=1)");
    }
    SUBCASE("an info that is no printable text is escaped") {
        const std::string odd("a\"\n\0\x7f", 5);
        CHECK(to_string(tensor::zeros(dtype::i4, {1}, odd)) ==
              "tensor(info=\"a\\x22\\x0a\\x00\\x7f\", dtype=i4, shape=[1], nbytes=4)");
    }
    SUBCASE("a stream's width pads the whole line, not its first piece") {
        std::ostringstream padded;
        padded << std::setw(5) << shape_t{1};
        CHECK(padded.str() == "  [1]");
    }
}
