# Thin wrapper over scripts/ and CMake. The two commands a user needs:
#   make run    install what is missing, build, serve the demo model on http://127.0.0.1:8080
#   make test   install what is missing, build, run every test
BUILD ?= build
CMAKE_FLAGS ?=
GENERATOR := $(shell command -v ninja >/dev/null 2>&1 && echo "-G Ninja")

.PHONY: all build deps test-deps run test bench format clean

all: build

deps:
	@scripts/setup-deps.sh

test-deps:
	@scripts/setup-deps.sh --test

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) $(GENERATOR) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $$(nproc)

run: deps build
	./$(BUILD)/hymt serve $(ARGS)

test: test-deps build
	@scripts/run-tests.sh $(BUILD)

bench: build
	@scripts/bench.sh $(BUILD)

format:
	clang-format -i $$(git ls-files '*.cc' '*.h' '*.cu' '*.cuh')

clean:
	rm -rf $(BUILD)
