// swift-tools-version:6.0
import PackageDescription

// The Swift peer of the benchmark: what a Swift programmer on Linux would
// write with FoundationNetworking's URLSession instead of syncagent.
let package = Package(
    name: "URLSessionPeer",
    targets: [.executableTarget(name: "URLSessionPeer")],
    swiftLanguageModes: [.v5]
)
