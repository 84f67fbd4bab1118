// compile_me.cpp: a small but real C++ translation unit for the LD_PRELOAD
// test of g++ (tests/scripts/preload_gxx.sh). It is compiled, never run: it
// only has to make the compiler allocate a lot (templates, the standard
// library headers, optimisation at -O2).
#include <algorithm>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

namespace demo {

template <class K, class V>
class Registry {
 public:
  void put(const K& k, V v) { items_[k] = std::move(v); }
  std::optional<V> get(const K& k) const {
    auto it = items_.find(k);
    if (it == items_.end()) return std::nullopt;
    return it->second;
  }
  template <class F>
  void each(F&& f) const {
    for (const auto& [k, v] : items_) f(k, v);
  }
  size_t size() const { return items_.size(); }

 private:
  std::map<K, V> items_;
};

template <int N>
struct Fib {
  static constexpr long value = Fib<N - 1>::value + Fib<N - 2>::value;
};
template <>
struct Fib<0> {
  static constexpr long value = 0;
};
template <>
struct Fib<1> {
  static constexpr long value = 1;
};

template <class... Ts>
struct Overload : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overload(Ts...) -> Overload<Ts...>;

using Value = std::variant<long, double, std::string, std::vector<long>>;

std::string describe(const Value& v) {
  return std::visit(Overload{
                        [](long x) { return "long " + std::to_string(x); },
                        [](double x) { return "double " + std::to_string(x); },
                        [](const std::string& s) { return "string " + s; },
                        [](const std::vector<long>& xs) {
                          return "vector of " + std::to_string(xs.size()) + " summing to " +
                                 std::to_string(std::accumulate(xs.begin(), xs.end(), 0L));
                        },
                    },
                    v);
}

struct Shape {
  virtual ~Shape() = default;
  virtual double area() const = 0;
  virtual std::string name() const = 0;
};
struct Circle final : Shape {
  double r;
  explicit Circle(double r) : r(r) {}
  double area() const override { return 3.14159265358979 * r * r; }
  std::string name() const override { return "circle"; }
};
struct Rect final : Shape {
  double w, h;
  Rect(double w, double h) : w(w), h(h) {}
  double area() const override { return w * h; }
  std::string name() const override { return "rect"; }
};

template <class It, class Pred>
std::vector<typename std::iterator_traits<It>::value_type> filter(It first, It last, Pred p) {
  std::vector<typename std::iterator_traits<It>::value_type> out;
  std::copy_if(first, last, std::back_inserter(out), p);
  return out;
}

std::unordered_map<std::string, int> word_counts(const std::string& text) {
  std::unordered_map<std::string, int> counts;
  std::istringstream in(text);
  std::string w;
  while (in >> w) ++counts[w];
  return counts;
}

}  // namespace demo

int main() {
  demo::Registry<std::string, demo::Value> reg;
  reg.put("answer", 42L);
  reg.put("pi", 3.14159);
  reg.put("name", std::string("freeway"));
  reg.put("fib", std::vector<long>{demo::Fib<10>::value, demo::Fib<20>::value, demo::Fib<30>::value});
  reg.each([](const std::string& k, const demo::Value& v) { std::cout << k << ": " << demo::describe(v) << '\n'; });

  std::vector<std::unique_ptr<demo::Shape>> shapes;
  for (int i = 1; i <= 10; ++i) {
    if (i % 2) shapes.push_back(std::make_unique<demo::Circle>(i));
    else shapes.push_back(std::make_unique<demo::Rect>(i, i + 1));
  }
  std::sort(shapes.begin(), shapes.end(), [](const auto& a, const auto& b) { return a->area() < b->area(); });
  for (const auto& s : shapes) std::cout << s->name() << ' ' << s->area() << '\n';

  std::vector<int> xs(100);
  std::iota(xs.begin(), xs.end(), 1);
  auto evens = demo::filter(xs.begin(), xs.end(), [](int x) { return x % 2 == 0; });
  std::cout << "evens: " << evens.size() << " sum " << std::accumulate(evens.begin(), evens.end(), 0) << '\n';

  auto counts = demo::word_counts("the quick brown fox jumps over the lazy dog the end");
  std::map<std::string, int> sorted(counts.begin(), counts.end());
  for (const auto& [w, c] : sorted) std::cout << w << '=' << c << ' ';
  std::cout << '\n';
  std::function<long(int)> fact = [&](int n) -> long { return n <= 1 ? 1 : n * fact(n - 1); };
  std::cout << "20! = " << fact(20) << '\n';
  return reg.get("missing").has_value() ? 1 : 0;
}
