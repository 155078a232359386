// A tenbin::source that hands out its bytes in pieces of the given sizes,
// in turn (a pipe, a socket), and may hide how many are left. Shared by
// the tests and the fuzz targets that read streams.
#pragma once

#include <tenbin/io.hpp>

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <vector>

namespace test_support {

class piecewise_source final : public tenbin::source {
public:
    piecewise_source(tenbin::bytes_view bytes, bool known_size, std::initializer_list<std::size_t> pieces)
        : bytes_(bytes), known_(known_size), pieces_(pieces) {}
    std::size_t read_some(tenbin::mutable_bytes out) override {
        largest_request = std::max(largest_request, out.size());
        const std::size_t piece = pieces_[calls_++ % pieces_.size()];
        const std::size_t n = std::min({piece, out.size(), bytes_.size() - pos_});
        if (n) std::memcpy(out.data(), bytes_.data() + pos_, n);
        pos_ += n;
        return n;
    }
    std::optional<std::uint64_t> remaining() const override {
        if (!known_) return std::nullopt;
        return bytes_.size() - pos_;
    }
    /// The largest piece asked for: the free space of the block the reader
    /// fills, hence a bound on what it allocated for the input.
    std::size_t largest_request = 0;

private:
    tenbin::bytes_view bytes_;
    bool known_;
    std::vector<std::size_t> pieces_;
    std::size_t pos_ = 0, calls_ = 0;
};

}  // namespace test_support
