import Hummingbird
import VaultAPI

// The API's messages live in VaultAPI, which clients share and which knows nothing of Hummingbird: the
// server makes them responses here, encoded by `VaultResponseEncoder` (Docs/design.md §6).
extension RegisterResponse: ResponseEncodable {}
extension LoginParametersResponse: ResponseEncodable {}
extension LoginResponse: ResponseEncodable {}
extension DirectoryEntry: ResponseEncodable {}
extension TresorInfo: ResponseEncodable {}
extension TresorList: ResponseEncodable {}
extension ShareInfo: ResponseEncodable {}
extension ShareList: ResponseEncodable {}
extension PatientList: ResponseEncodable {}
extension PushResponse: ResponseEncodable {}
extension AuditPage: ResponseEncodable {}
extension PendingResponse: ResponseEncodable {}
extension UserSummary: ResponseEncodable {}
extension UserList: ResponseEncodable {}
extension AuditVerification: ResponseEncodable {}
extension HealthResponse: ResponseEncodable {}
extension DeploymentResponse: ResponseEncodable {}
