// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "syncagent",
    products: [
        .executable(name: "syncagent", targets: ["syncagent"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-crypto", from: "3.12.3"),
        .package(url: "https://github.com/apple/swift-collections", from: "1.1.0"),
        // The aria2-compatible RPC server: NIO's own HTTP/1.1 and WebSocket handlers.
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
    ],
    targets: [
        // Pure: events, the fold, job parsing, scheduling and recovery decisions. No I/O.
        .target(name: "SyncAgentCore", dependencies: [.product(name: "DequeModule", package: "swift-collections")]),
        // C edge: libcurl, opened as the agent starts (not linked: every command would load it),
        // and typed wrappers for its variadic functions.
        .target(
            name: "CCurlShims",
            linkerSettings: [.linkedLibrary("dl")]
        ),
        // C edge: the one Linux system call Glibc does not wrap (openat2).
        .target(name: "CLinuxShims"),
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        // The engine: the event loop and its effect shells (SQLite, inotify, curl, libnotify, the RPC server).
        .target(
            name: "SyncAgent",
            dependencies: [
                "SyncAgentCore", "CCurlShims", "CLinuxShims", "CSQLite",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
                // AES-128-CBC for encrypted HLS segments.
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                // The RPC server, on NIO's own thread (see RPC/RPCServer.swift).
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
            ]
        ),
        // The CLI: parsing and printing only.
        .executableTarget(
            name: "syncagent",
            dependencies: [
                "SyncAgent", "SyncAgentCore",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // Writes large event logs for `make bench`.
        .executableTarget(name: "syncagent-loggen", dependencies: ["SyncAgent", "SyncAgentCore"], path: "bench/LogGen"),
        // Real servers for the tests: nginx, a private D-Bus with dbusmock, the agent binary.
        .target(name: "TestSupport", dependencies: ["SyncAgentCore"], path: "Tests/TestSupport",
                exclude: ["fault_server.py", "tus_server.py", "rpc_client.py", "forgetfs"]),
        // The fuzz target's body: every parser of outside input, fed one input.
        .target(name: "SyncAgentFuzzing", dependencies: ["SyncAgentCore"]),
        .testTarget(name: "SyncAgentCoreTests", dependencies: ["SyncAgentCore", "SyncAgentFuzzing", "TestSupport"]),
        .testTarget(name: "SyncAgentTests", dependencies: ["SyncAgent", "SyncAgentCore", "TestSupport"]),
        .testTarget(name: "syncagentCLITests", dependencies: ["SyncAgentCore", "TestSupport"]),
    ],
    // Data-race checks on across the loop and its worker threads; Linux only.
    swiftLanguageModes: [.v6]
)

// `make fuzz` only: libFuzzer's driver around SyncAgentFuzzing, built with
// -sanitize=fuzzer (a normal build could not link it).
if Context.environment["SYNCAGENT_FUZZ"] != nil {
    package.targets.append(.executableTarget(name: "syncagent-fuzz", dependencies: ["SyncAgentFuzzing"]))
}
