import { behavesAsAParkingStore } from '../../../test/suites/parking-store.suite';
import { memoryWorld } from '../../../test/suites/store-world';

behavesAsAParkingStore(memoryWorld());
