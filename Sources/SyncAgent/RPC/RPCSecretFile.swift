import Foundation
import Logging
import SyncAgentCore

/// The RPC secret when config.toml names none: made once, 64 random hex
/// digits, in `STATE_DIR/rpc-secret` (mode 0600, like the state dir's
/// other files), and read from there at every later start.
enum RPCSecretFile {
    static func secret(configured: String?, stateDir: String, logger: Logger) throws -> String {
        if let configured { return configured }
        let path = stateDir + "/" + RPCListen.secretFileName
        if let data = FileManager.default.contents(atPath: path) {
            let kept = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            guard !kept.isEmpty, !kept.unicodeScalars.contains(where: { $0.value < 0x21 || $0.value == 0x7F }) else {
                throw ConfigError(description: "\(path): the RPC secret there is empty or has spaces; remove the file and the agent makes a new one")
            }
            // Made 0600, it stays so: a secret others can read is no secret.
            let info = try Posix.status(of: path)
            guard info.st_mode & 0o077 == 0 else {
                throw ConfigError(description: "\(path): the RPC secret can be read by others (mode \(String(info.st_mode & 0o777, radix: 8))); chmod 600 it")
            }
            logger.info("RPC secret read from the state dir", metadata: ["rpc.secret_file": "\(path)"])
            return kept
        }
        let made = RPCSecret.random()
        try FileSystem.writeAtomically(made + "\n", to: path, mode: 0o600)
        logger.notice("no rpc_secret in the config: made one; RPC clients need it as their token",
                      metadata: ["rpc.secret_file": "\(path)"])
        return made
    }
}
