public enum SyncAgentVersion {
    public static let current = "0.1.0"
}
